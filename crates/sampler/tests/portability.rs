//! Seeded generations give the ids recorded in `tests/fixtures/sampler-determinism.json`, the
//! file the wasm32 build of the same probe is checked against in Node (`./build.sh test`).

#[allow(dead_code)]
#[path = "../examples/determinism_probe.rs"]
mod probe;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/sampler-determinism.json");

#[test]
fn native_draws_match_the_recorded_ids() {
    let ids = probe::probe_ids();
    assert_eq!(ids.len(), probe::probe_len());
    if std::env::var_os("NUCLEUS_RECORD_DETERMINISM").is_some() {
        std::fs::write(FIXTURE, format!("{{\"ids\":{ids:?}}}\n")).unwrap();
    }
    // Compiled in, so the test does not depend on where it runs from.
    let fixture = include_str!("../../../tests/fixtures/sampler-determinism.json");
    let start = fixture.find('[').expect("an array") + 1;
    let end = fixture.rfind(']').expect("an array");
    let recorded: Vec<u32> = fixture[start..end].split(',').map(|s| s.trim().parse().unwrap()).collect();
    assert_eq!(ids, recorded);
    // Five parameter sets, each its own sequence.
    assert!(ids.chunks(ids.len() / 5).collect::<std::collections::BTreeSet<_>>().len() == 5);
}

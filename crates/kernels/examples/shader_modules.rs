//! Writes every module the layer kernels can be assembled into (each weight format, both
//! tunings, one-row and many-row, staged and not) into a folder, one `.wgsl` file each, so that
//! a browser's own WGSL compiler can check them (`tests/browser/shaders.test.mjs`).
//!
//! `cargo run --release -p nucleus-kernels --example shader_modules -- OUT_DIR`

use nucleus_kernels::Tuning;

fn main() {
    let out = std::env::args().nth(1).expect("usage: shader_modules OUT_DIR");
    std::fs::create_dir_all(&out).expect("create the folder");
    let mut count = 0;
    for tuning in [Tuning::CPU_ADAPTER, Tuning::GPU] {
        for (label, source) in nucleus_kernels::layer::module_variants(tuning) {
            let name: String =
                label.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
            std::fs::write(format!("{out}/{name}.wgsl"), source).expect("write a module");
            count += 1;
        }
    }
    println!("{count} modules written to {out}");
}

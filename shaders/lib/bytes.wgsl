// bytes.wgsl: readers of the weight binding {{W}} (array<u32>: a tensor's GGUF bytes, padded to
// a multiple of 4) at a byte offset. Instantiated once per weight binding by the shader builder.
// GGUF blocks of 18, 34 or 210 bytes start on even bytes only, hence the 2-aligned readers.

// The 16-bit little-endian value at an even byte offset.
fn {{W}}_u16(byte: u32) -> u32 {
    return ({{W}}[byte >> 2u] >> ((byte & 2u) << 3u)) & 0xffffu;
}

// The 32-bit little-endian value at an even byte offset.
fn {{W}}_u32(byte: u32) -> u32 {
    let word = byte >> 2u;
    if (byte & 2u) == 0u {
        return {{W}}[word];
    }
    return ({{W}}[word] >> 16u) | ({{W}}[word + 1u] << 16u);
}

// The 8 little-endian bytes at an even byte offset, as two words: three aligned loads and a
// shift, no branch (the third word is only used when the offset is not a multiple of 4; past
// the end of the buffer it is a robust access whose value is not used).
fn {{W}}_u64(byte: u32) -> vec2<u32> {
    let word = byte >> 2u;
    let a = {{W}}[word];
    let b = {{W}}[word + 1u];
    let c = {{W}}[word + 2u];
    let shifted = vec2<u32>((a >> 16u) | (b << 16u), (b >> 16u) | (c << 16u));
    return select(shifted, vec2<u32>(a, b), (byte & 2u) == 0u);
}

// The byte at any offset.
fn {{W}}_u8(byte: u32) -> u32 {
    return ({{W}}[byte >> 2u] >> ((byte & 3u) << 3u)) & 0xffu;
}

// The IEEE half-precision value at an even byte offset, as f32 (exact).
fn {{W}}_f16(byte: u32) -> f32 {
    return unpack2x16float({{W}}_u16(byte)).x;
}

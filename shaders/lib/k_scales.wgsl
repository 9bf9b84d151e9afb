// k_scales.wgsl: the packed 6-bit scales and mins of the Q4_K and Q5_K blocks of the weight
// binding {{W}} (instantiated for a binding in either format). Both blocks hold, at byte 4, 12
// bytes packing eight scales and eight mins as llama.cpp's get_scale_min_k4 reads them.

// (scale, min) of sub-block j (0..8) of the block starting at byte `start`.
fn {{W}}_scale_min(start: u32, j: u32) -> vec2<f32> {
    let s = start + 4u;
    if j < 4u {
        return vec2<f32>(f32({{W}}_u8(s + j) & 63u), f32({{W}}_u8(s + j + 4u) & 63u));
    }
    let scale = ({{W}}_u8(s + j + 4u) & 15u) | (({{W}}_u8(s + j - 4u) >> 6u) << 4u);
    let offset = ({{W}}_u8(s + j + 4u) >> 4u) | (({{W}}_u8(s + j) >> 6u) << 4u);
    return vec2<f32>(f32(scale), f32(offset));
}

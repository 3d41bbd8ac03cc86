// Floating-point tensors stored as F32, BF16 or F16 in a safetensors file (Megatron and Hugging Face checkpoints are
// often bf16), decoded to the fp32 that hytra's master weights and optimizer moments hold.
#pragma once
#include <cstdint>
#include <string>

namespace hytra {

// Whether decode_f32 reads safetensors dtype `dtype` ("F32", "BF16", "F16").
bool decodable_float(const std::string& dtype);
// The size of one element of such a dtype.
int64_t float_bytes(const std::string& dtype);
// count elements of `dtype` at `src` (little-endian, as safetensors stores them) -> fp32 at `dst`. Exact: every bf16
// and f16 value (subnormals, infinities, NaN) has an fp32 equal.
void decode_f32(const std::string& dtype, const unsigned char* src, int64_t count, float* dst);
// Whether count elements of `dtype` at `src` are all finite (no NaN or infinity).
bool all_finite(const std::string& dtype, const unsigned char* src, int64_t count);
// IEEE binary16 bits -> fp32.
float half_to_float(uint16_t h);

}  // namespace hytra

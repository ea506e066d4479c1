// The CPU engine's decode GEMV on weights packed once at load: Y[rows][out] = X[rows][in] · W
// for a few rows (decode batches, verify passes), streaming the weights in their stored type.
//
// Why packed: the reference GEMV reads a [in][out] matrix 16 columns at a time, one cache line per
// input row at a stride of `out` floats, so every line is a fresh page for the hardware prefetcher
// and the engine ran at a few GB/s. Here the matrix is cut into panels of kPanel columns, each
// stored input-major and contiguous, so a panel is one forward stream.
//
// Why bf16 is exact: the engine's weights are bf16 values held in float32 (checkpoints are bf16,
// random weights are rounded to it). When every value of a matrix is exactly a bf16 it is stored
// as bf16 (half the bytes) and widened in registers, which is lossless; otherwise as float32.
// Each output is one fused multiply-add per input in input order from zero, the reference GEMV's
// order, so the result is bit for bit the reference's and does not depend on the other rows.
//
// Block-quantized weights (GGUF's Q8_0, Q4_0, Q4_1) are streamed as stored, 4.25-8.5 bits a
// weight: the blocks of 32 inputs are regrouped into the same 64-column panels (packed_gemv_blocks.cpp)
// and each weight is widened in registers to the float ggml's dequantization gives (exactly:
// d·q is exact in float32 and d·q + m is rounded once either way), then multiplied in the same
// order, so the product is bit for bit the reference GEMV's on the dequantized matrix.
//
// Or, as llama.cpp multiplies them (BlockDot::Int8, packed_gemv_int8.cpp): each row of activations
// quantized to Q8_0 per 32 inputs and every block's dot product summed in integers, scaled once
// per block. Not the float product: the product of the dequantized weights and the dequantized
// activations, within the activations' quantization error of it, and no widening per weight.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace ib {

// Q8_0_I8 and Q4_1_I8: the block types laid out for integer dot products (BlockDot::Int8).
enum class PackedType { F32, BF16, Q8_0, Q4_1, Q8_0_I8, Q4_1_I8 };
// GGUF's block formats (ggml's layout): a matrix is rows of `out`, each in/32 blocks of 32 inputs.
// Q8_0: fp16 d, 32 int8 q (34 bytes), w = d·q. Q4_0: fp16 d, 16 bytes of nibbles (18), w = d·(q - 8).
// Q4_1: fp16 d, fp16 m, 16 bytes of nibbles (20), w = d·q + m. Nibble j of a block is the low half
// of byte j, nibble j + 16 its high half.
enum class BlockType { Q8_0, Q4_0, Q4_1 };
int block_bytes(BlockType t);  // bytes of one block of 32 inputs
// How block weights meet the activations: Exact (each weight widened to ggml's float, the float
// product bit for bit) or Int8 (activations quantized to Q8_0, integer dot products).
enum class BlockDot { Exact, Int8 };
// The vector instructions a kernel uses; every level computes the same bits.
enum class CpuIsa { Generic, Avx2, Avx512 };
CpuIsa best_cpu_isa();            // the widest this CPU runs
const char* to_string(CpuIsa i);  // "generic", "avx2", "avx512"
// The kernel of an instruction level: one choice for every kernel family (float and block panels).
template <class Fn>
Fn for_isa(CpuIsa isa, Fn avx512, Fn avx2, Fn generic) {
  return isa == CpuIsa::Avx512 ? avx512 : isa == CpuIsa::Avx2 ? avx2 : generic;
}
const char* to_string(PackedType t);  // "f32", "bf16", "q8_0", "q4_1", "q8_0_i8", "q4_1_i8"
bool cpu_has_avx512_vnni();           // the Int8 kernels' instructions (else their generic form)

class PackedWeights {
 public:
  static constexpr int kPanel = 64;

  PackedWeights() = default;
  // wt is [in][out] row-major float32. bf16 storage when `allow_bf16` and every value is exactly
  // a bf16 (lossless); float32 otherwise.
  PackedWeights(const float* wt, int in, int out, bool allow_bf16 = true);
  // `rows` is [out][in / 32] blocks of `t` (in a multiple of 32). Q4_0 is stored as Q4_1 with
  // m = -8·d (exact in fp16 while |d| < 8192, which the constructor checks). Throws
  // std::invalid_argument for an `in` that is not a multiple of 32 or a d it cannot keep exact.
  PackedWeights(BlockType t, const uint8_t* rows, int in, int out, BlockDot dot = BlockDot::Exact);

  bool empty() const { return !data_; }
  int in() const { return in_; }
  int out() const { return out_; }
  PackedType type() const { return type_; }
  size_t panels() const { return static_cast<size_t>((out_ + kPanel - 1) / kPanel); }
  size_t bytes() const { return bytes_; }
  bool blocks() const { return type_ != PackedType::F32 && type_ != PackedType::BF16; }
  bool int8_dot() const { return type_ == PackedType::Q8_0_I8 || type_ == PackedType::Q4_1_I8; }

  // y[r][o] = Σ_i x[r][i]·W[i][o] for the columns of panels [p0, p1) (row strides in and out),
  // on the calling thread; the caller splits panels over threads. `isa` below the best: tests.
  void multiply(const float* x, int rows, size_t p0, size_t p1, float* y, CpuIsa isa = best_cpu_isa()) const;

 private:
  struct Free {
    void operator()(void* p) const;
  };
  int in_ = 0, out_ = 0;
  PackedType type_ = PackedType::F32;
  size_t bytes_ = 0;
  // F32/BF16: panels × in × kPanel elements. Q8_0/Q4_1: panels × in/32 block panels
  // (packed_gemv_blocks.cpp); Q8_0_I8/Q4_1_I8: panels of two 32-column halves (packed_gemv_int8.cpp).
  // 64-byte aligned.
  std::unique_ptr<unsigned char, Free> data_;
};

// The block-panel kernels (packed_gemv_blocks.cpp): panels [p0, p1) of a Q8_0/Q4_1 matrix.
void multiply_block_panels(PackedType t, const unsigned char* data, int in, int out, const float* x, int rows, size_t p0,
                           size_t p1, float* y, CpuIsa isa);
// A Q4_0/Q4_1 block's offset m as fp16 bits (Q4_0: -8·d, exact or std::invalid_argument).
uint16_t block_offset_fp16(BlockType t, const uint8_t* block);
// The Int8 layout (packed_gemv_int8.cpp): a panel's bytes; the blocks regrouped into zeroed `data`;
// panels [p0, p1) against x quantized per 32 inputs (Avx512 is the VNNI kernel where the CPU has
// it; every level computes the same bits).
size_t dot_panel_bytes(PackedType t, int in);
void pack_dot_panels(BlockType t, const uint8_t* rows, int in, int out, unsigned char* data);
void multiply_dot_panels(PackedType t, const unsigned char* data, int in, int out, const float* x, int rows, size_t p0, size_t p1,
                         float* y, CpuIsa isa);

}  // namespace ib

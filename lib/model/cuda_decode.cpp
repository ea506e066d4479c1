// CUDA variants of the `decode` kind (the engine of lib/model/cuda_model*.cpp).
#include "core/registry.h"
#include "model/decode_variants.h"

namespace ib::model {
namespace {

struct Generate : DecodeVariant {
  Generate() : DecodeVariant(Backend::Cuda, DecodeMeasure::Generate, true) {}
};
struct DecodeStep : DecodeVariant {
  DecodeStep() : DecodeVariant(Backend::Cuda, DecodeMeasure::Step, true) {}
};
struct DecodeStepEager : DecodeVariant {
  DecodeStepEager() : DecodeVariant(Backend::Cuda, DecodeMeasure::Step, false) {}
};
struct Prefill : DecodeVariant {
  Prefill() : DecodeVariant(Backend::Cuda, DecodeMeasure::Prefill, true) {}
};

IB_REGISTER_VARIANT("decode", "generate", Generate);
IB_REGISTER_VARIANT("decode", "decode_step", DecodeStep);
IB_REGISTER_VARIANT("decode", "decode_step_eager", DecodeStepEager);
IB_REGISTER_VARIANT("decode", "prefill", Prefill);

}  // namespace
}  // namespace ib::model

#include "kinds/kvcache/kv_decode_keys.h"

namespace ib::kvcache {
namespace {

// The shape's keys both kinds share; block_size's default and doc are the kind's.
ParamSet<KvDecodeKeys> shape_keys(bool paged) {
  using K = KvDecodeKeys;
  return ParamSet<KvDecodeKeys>()
      .add(&K::batch,
           key_spec("batch", ParamType::Int, "sequences decoded together (one query token each)", Value(int64_t{1}), 1.0))
      .add(&K::heads, key_spec("heads", ParamType::Int, "query heads", Value(int64_t{32}), 1.0))
      .add(&K::kv_heads,
           key_spec("kv_heads", ParamType::Int, "key/value heads (grouped-query attention); 0 = heads", Value(int64_t{0}), 0.0))
      .add(&K::head_dim, key_spec("head_dim", ParamType::Int, "dimension of a head", Value(int64_t{128}), 1.0, 1024.0))
      .add(&K::context,
           key_spec("context", ParamType::Int, "tokens in the cache of the longest sequence", Value(int64_t{4096}), 1.0))
      .add(&K::ragged, key_spec("ragged", ParamType::Bool,
                                "sequence lengths vary in (context/2, context] (sequence 0 has context)", Value(false)))
      .add(&K::block_size, key_spec("block_size", ParamType::Int,
                                    paged ? "tokens per KV block of the paged variants"
                                          : "0: contiguous cache; > 0: paged with blocks of this many tokens",
                                    Value(int64_t{paged ? 16 : 0}), paged ? 1.0 : 0.0, 4096.0))
      .add(&K::splits, key_spec("splits", ParamType::Int,
                                "CUDA: blocks per (sequence, kv head) of the split-K kernel; 0 = enough to fill the GPU",
                                Value(int64_t{0}), 0.0, 1024.0));
}

KeySpec kivi_group_spec(KvFormat f) {
  return key_spec(kivi_group_key(f), ParamType::Int,
                  std::string(to_string(f)) +
                      " (KIVI): G, tokens per key group (per-channel scales) and channels per value group (per-token "
                      "scales); the last length mod G tokens stay bf16",
                  Value(int64_t{kKiviGroup}), 2.0, 1024.0);
}

}  // namespace

const ParamSet<KvDecodeKeys>& kv_quant_keys() {
  static const ParamSet<KvDecodeKeys> set = shape_keys(false)
                                                .add(&KvDecodeKeys::int4_group, kivi_group_spec(KvFormat::INT4))
                                                .add(&KvDecodeKeys::int2_group, kivi_group_spec(KvFormat::INT2));
  return set;
}

const ParamSet<KvDecodeKeys>& kv_paged_keys() {
  static const ParamSet<KvDecodeKeys> set = shape_keys(true).add(
      &KvDecodeKeys::kv_dtype, enum_key("kv_dtype", "element type of the cache", "bf16", {"bf16", "fp8", "int8"}),
      [](const std::string& s) { return kv_format_from_string(s).value_or(KvFormat::BF16); });
  return set;
}

DecodeShape decode_shape(const KvDecodeKeys& k, KvFormat format) {
  DecodeShape s;
  s.batch = static_cast<int>(k.batch);
  s.heads = static_cast<int>(k.heads);
  s.kv_heads = k.kv_heads == 0 ? s.heads : static_cast<int>(k.kv_heads);
  s.head_dim = static_cast<int>(k.head_dim);
  s.context = static_cast<int>(k.context);
  s.ragged = k.ragged;
  s.format = format;
  s.block_size = static_cast<int>(k.block_size);
  if (format == KvFormat::INT4) s.kivi_group = static_cast<int>(k.int4_group);
  if (format == KvFormat::INT2) s.kivi_group = static_cast<int>(k.int2_group);
  return s;
}

std::vector<std::string> quant_variant_keys(bool cuda, KvFormat format) {
  std::vector<std::string> keys = {"batch", "heads", "kv_heads", "head_dim", "context", "ragged", "block_size"};
  if (cuda) keys.push_back("splits");
  if (is_kivi(format)) keys.push_back(kivi_group_key(format));
  return keys;
}

}  // namespace ib::kvcache

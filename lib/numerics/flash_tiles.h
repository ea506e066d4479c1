// Which key tiles a block of query rows must visit in a fused (flash) attention kernel: all of
// them, or with a causal mask (bottom-right aligned: query i sees keys j <= i + seq_k − seq_q) only
// up to the tile holding the last key its last row sees, and with a sliding window also none
// before the tile holding the first key its first row sees; and which keys a row does not see.
// Used by the flash3 kernel (flash2 keeps its own copy of the same rules: moving it here changed
// its register allocation) and checked by a CPU unit test against
// AttentionShape::first_key/visible_keys (the float64 reference's rule).
#pragma once

#include "numerics/hd.h"

namespace ib {

struct KeyTileRange {
  int first = 0;  // index of the first key tile to visit (keys first·tile ..)
  int count = 0;  // tiles first .. first + count − 1; 0: no query row of the block sees any key
};

// Rows m0 .. m0 + rows − 1 (those < seq_q count), key tiles of `tile` keys; `window` (causal
// only) as in AttentionParams: query i sees keys i + shift − window < j <= i + shift.
IB_HD KeyTileRange flash_key_tiles(int m0, int rows, int seq_q, int seq_k, bool causal, int window, int tile) {
  KeyTileRange r;
  r.count = (seq_k + tile - 1) / tile;
  if (causal) {
    const int shift = seq_k - seq_q;
    const int last_row = (m0 + rows < seq_q ? m0 + rows : seq_q) - 1;
    const int last_key = last_row + shift;  // < 0 when seq_q > seq_k and these rows see nothing
    const int end = last_key < 0 ? 0 : last_key / tile + 1;
    r.count = end < r.count ? end : r.count;
    if (window > 0) {
      const int first_key = m0 + shift - window + 1;
      r.first = first_key > 0 ? first_key / tile : 0;
      r.count = r.count > r.first ? r.count - r.first : 0;
    }
  }
  return r;
}

// Whether query `row` does not see `key` (0-based, shift = seq_k − seq_q): the key is past
// seq_k, or (causal) after the row's diagonal, or (window > 0) at or before row + shift − window.
IB_HD bool key_hidden(int key, int row, int seq_k, bool causal, int shift, int window) {
  return key >= seq_k || (causal && key > row + shift) || (window > 0 && key <= row + shift - window);
}

// Whether some key of n0 .. n0 + keys − 1 is hidden from some row of row0 .. row0 + rows − 1:
// the tiles a kernel must mask (exactly those: the tile reaching past seq_k, the tiles whose last
// key passes the first row's diagonal, the tiles whose first key is at or before the last row's
// window start).
IB_HD bool tile_needs_mask(int n0, int keys, int row0, int rows, int seq_k, bool causal, int shift, int window) {
  return n0 + keys > seq_k || (causal && n0 + keys - 1 > row0 + shift) || (window > 0 && n0 <= row0 + rows - 1 + shift - window);
}

}  // namespace ib

// A randomized Hadamard rotation of KV rows, per head (QuaRot, arXiv
// 2404.00456): x -> H D x / sqrt(d), D a fixed diagonal of +-1 signs, H the
// d x d Walsh-Hadamard matrix. Orthogonal, so attention's dot products do
// not change when both sides rotate, and a coder can quantize the rotated
// values and rotate back after decoding: the rotation spreads an outlier
// channel's energy over the head, which a 4-bit grid with one scale per
// block holds much better. A study in the quality harness (tracks
// "int4+rot", "fp4-e2m1+rot"), not a wire format.
//
// Pure functions; thread-safe.
#ifndef KVCAST_TOOLS_KVQUALITY_ROTATION_H_
#define KVCAST_TOOLS_KVQUALITY_ROTATION_H_

namespace kvcast::kvquality {

// Whether rows of heads of this size can rotate (a power of two, >= 2).
bool RotatableHeadDim(int head_dim);

// Rotates (or, with `inverse`, rotates back) each head_dim block of
// x[0, values) in place; values % head_dim == 0 and RotatableHeadDim.
void RotateHeads(float* x, int values, int head_dim, bool inverse);

}  // namespace kvcast::kvquality

#endif  // KVCAST_TOOLS_KVQUALITY_ROTATION_H_

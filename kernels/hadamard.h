// The randomized Hadamard rotation of one head's KV (QuaRot, arXiv
// 2404.00456), as the rotated ac tracks send it (docs/kvcache-wire-format.md,
// "Transform"): forward y = H (D x), inverse x = D (H y) / d, with H the
// d x d Walsh-Hadamard matrix unnormalized (H H = d I) and D a diagonal of
// fixed signs. The rotation spreads an outlier channel's energy over the
// head, which a quantizer with one step (or scale) per head holds much
// better; attention's dot products only scale by d, so nothing of the
// model changes.
//
// Exact definition (every decoder computes the same floats):
//  - H y: in-place butterflies for h = 1, 2, 4, ..., d/2, for i = 0, 2h,
//    4h, ..., for j = i .. i+h-1: (y_j, y_{j+h}) <- (y_j + y_{j+h},
//    y_j - y_{j+h}), each one binary32 sum rounded to nearest even;
//  - D: s_c = -1 when the lowest bit of splitmix64(c) is 1, else +1
//    (splitmix64(c): z = c + 0x9e3779b97f4a7c15; z = (z ^ (z >> 30)) *
//    0xbf58476d1ce4e5b9; z = (z ^ (z >> 27)) * 0x94d049bb133111eb; z ^
//    (z >> 31), all mod 2^64);
//  - the inverse's division by d: one binary32 product with 2^-log2(d).
//
// Pure functions; thread-safe.
#ifndef KVCAST_KERNELS_HADAMARD_H_
#define KVCAST_KERNELS_HADAMARD_H_

namespace kvcast {

// Whether heads of d values rotate: a power of two, 2 .. 1024.
bool HadamardDim(int d);
// s_c, +1 or -1.
float HadamardSign(int c);
// x[0, d) <- H (D x), in place; HadamardDim(d).
void RotateHead(float* x, int d);
// y[0, d) <- D (H y) / d, in place: RotateHead's inverse.
void UnrotateHead(float* y, int d);
// Every head of x[0, values) (values % d == 0), forward or inverse.
void RotateHeads(float* x, int values, int d, bool inverse);

}  // namespace kvcast

#endif  // KVCAST_KERNELS_HADAMARD_H_

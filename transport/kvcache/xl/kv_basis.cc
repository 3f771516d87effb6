// The cross-layer KV basis: see kv_basis.h.
#include "transport/kvcache/xl/kv_basis.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"

extern "C" void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a,
                        const int* lda, double* w, double* work, const int* lwork, int* iwork,
                        const int* liwork, int* info);

namespace kvcast::kvcache::xl {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'X', 'L', 'B', 'A', 'S', '1'};

uint64_t Fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// The block layout of a shape and group size: (first layer, layers) per group.
std::vector<std::pair<int, int>> Groups(int num_layers, int group_layers) {
  std::vector<std::pair<int, int>> out;
  for (int l = 0; l < num_layers; l += group_layers) {
    out.emplace_back(l, std::min(group_layers, num_layers - l));
  }
  return out;
}

absl::Status CheckGrouping(const AcShape& shape, int group_layers) {
  if (absl::Status s = ac::ValidateShape(shape); !s.ok()) return s;
  if (group_layers < 1 || group_layers > shape.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("kv basis: groups of ", group_layers,
                                                   " layers for ", shape.num_layers, " layers"));
  }
  return absl::OkStatus();
}

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

}  // namespace

std::string KvBasis::Serialize() const {
  std::string out(kMagic, sizeof(kMagic));
  for (int v : {shape_.num_layers, shape_.num_kv_heads, shape_.head_dim, group_layers_}) {
    Put<uint16_t>(&out, uint16_t(v));
  }
  for (const Block& b : blocks_) {
    out.append(reinterpret_cast<const char*>(b.mean.data()), b.mean.size() * 4);
    out.append(reinterpret_cast<const char*>(b.variance.data()), b.variance.size() * 4);
    std::vector<uint16_t> half(b.axes.size());
    for (size_t i = 0; i < half.size(); ++i) half[i] = FloatToHalf(b.axes[i]);  // exact
    out.append(reinterpret_cast<const char*>(half.data()), half.size() * 2);
  }
  return out;
}

absl::StatusOr<KvBasis> KvBasis::Parse(std::string_view bytes) {
  constexpr size_t kHeader = sizeof(kMagic) + 8;
  if (bytes.size() < kHeader || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError("kv basis: not a KVXLBAS1 file");
  }
  uint16_t v[4];
  std::memcpy(v, bytes.data() + sizeof(kMagic), sizeof(v));
  KvBasis b;
  b.shape_ = {v[0], v[1], v[2]};
  b.group_layers_ = v[3];
  if (absl::Status s = CheckGrouping(b.shape_, b.group_layers_); !s.ok()) return s;
  size_t at = kHeader;
  for (const auto& [first, layers] : Groups(b.shape_.num_layers, b.group_layers_)) {
    for (int kind = 0; kind < 2; ++kind) {
      Block blk;
      blk.first_layer = first;
      blk.layers = layers;
      blk.dim = layers * b.shape_.num_kv_heads * b.shape_.head_dim;
      const size_t d = blk.dim, need = d * 8 + d * d * 2;
      if (bytes.size() - at < need) {
        return absl::InvalidArgumentError(
            absl::StrCat("kv basis: ", bytes.size(), " bytes, truncated at layer ", first));
      }
      blk.mean.resize(d);
      blk.variance.resize(d);
      blk.axes.resize(d * d);
      std::memcpy(blk.mean.data(), bytes.data() + at, d * 4);
      std::memcpy(blk.variance.data(), bytes.data() + at + d * 4, d * 4);
      const char* half = bytes.data() + at + d * 8;
      for (size_t i = 0; i < d * d; ++i) {
        uint16_t h;
        std::memcpy(&h, half + 2 * i, 2);
        blk.axes[i] = HalfToFloat(h);
      }
      for (size_t i = 0; i < d; ++i) {
        const float v = blk.variance[i];
        if (!(v >= 0) || !std::isfinite(v) || (i > 0 && v > blk.variance[i - 1])) {
          return absl::InvalidArgumentError(absl::StrCat(
              "kv basis: variance ", i, " of the block at layer ", first, " (kind ", kind,
              ") is ", v, "; variances are finite, >= 0 and descending"));
        }
      }
      at += need;
      b.blocks_.push_back(std::move(blk));
    }
  }
  if (at != bytes.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv basis: ", bytes.size() - at, " bytes past the last block"));
  }
  b.id_ = Fnv1a64(bytes);
  return b;
}

absl::StatusOr<KvBasis> KvBasis::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("kv basis: cannot open ", path));
  std::ostringstream s;
  s << in.rdbuf();
  absl::StatusOr<KvBasis> b = Parse(s.str());
  if (!b.ok()) return absl::Status(b.status().code(), absl::StrCat(path, ": ", b.status().message()));
  return b;
}

absl::Status KvBasis::Save(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const std::string bytes = Serialize();
  out.write(bytes.data(), std::streamsize(bytes.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("kv basis: cannot write ", path));
  return absl::OkStatus();
}

KvBasisFitter::KvBasisFitter(const AcShape& shape, int group_layers)
    : shape_(shape), group_layers_(group_layers) {
  if (!CheckGrouping(shape, group_layers).ok()) return;
  for (const auto& [first, layers] : Groups(shape.num_layers, group_layers)) {
    const size_t dim = size_t(layers) * shape.num_kv_heads * shape.head_dim;
    for (int kind = 0; kind < 2; ++kind) {
      sum_.emplace_back(dim, 0.0);
      cov_.emplace_back(dim * dim, 0.0);
    }
  }
}

void KvBasisFitter::Add(const float* kv, int count) {
  if (sum_.empty() || count <= 0) return;
  const int row = shape_.num_kv_heads * shape_.head_dim;
  const size_t token = shape_.token_floats();
  const auto groups = Groups(shape_.num_layers, group_layers_);
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto [first, layers] = groups[g];
    const int dim = layers * row;
    for (int kind = 0; kind < 2; ++kind) {
      rows_.resize(size_t(count) * dim);
      std::vector<double>& sum = sum_[2 * g + kind];
      for (int t = 0; t < count; ++t) {
        double* r = rows_.data() + size_t(t) * dim;
        for (int l = 0; l < layers; ++l) {
          const float* src = kv + t * token + size_t(first + l) * 2 * row + kind * row;
          for (int c = 0; c < row; ++c) r[l * row + c] = src[c];
        }
        for (int i = 0; i < dim; ++i) sum[i] += r[i];
      }
      cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, dim, count, 1.0, rows_.data(), dim, 1.0,
                  cov_[2 * g + kind].data(), dim);
    }
  }
  samples_ += count;
}

absl::StatusOr<KvBasis> KvBasisFitter::Fit() const {
  if (absl::Status s = CheckGrouping(shape_, group_layers_); !s.ok()) return s;
  if (samples_ < 2) {
    return absl::FailedPreconditionError(
        absl::StrCat("kv basis: ", samples_, " calibration tokens (2 at least)"));
  }
  KvBasis b;
  b.shape_ = shape_;
  b.group_layers_ = group_layers_;
  const double n = double(samples_);
  const auto groups = Groups(shape_.num_layers, group_layers_);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int kind = 0; kind < 2; ++kind) {
      const std::vector<double>& sum = sum_[2 * g + kind];
      const int dim = int(sum.size());
      // Covariance (row-major upper = column-major lower), centred.
      std::vector<double> a = cov_[2 * g + kind];
      for (int i = 0; i < dim; ++i) {
        for (int j = i; j < dim; ++j) {
          a[size_t(i) * dim + j] = a[size_t(i) * dim + j] / n - (sum[i] / n) * (sum[j] / n);
        }
      }
      std::vector<double> w(dim);
      int lwork = -1, liwork = -1, info = 0, iwork_size = 0;
      double work_size = 0;
      dsyevd_("V", "L", &dim, a.data(), &dim, w.data(), &work_size, &lwork, &iwork_size,
              &liwork, &info);
      lwork = int(work_size);
      liwork = iwork_size;
      std::vector<double> work(std::max(lwork, 1));
      std::vector<int> iwork(std::max(liwork, 1));
      dsyevd_("V", "L", &dim, a.data(), &dim, w.data(), work.data(), &lwork, iwork.data(),
              &liwork, &info);
      if (info != 0) {
        return absl::InternalError(absl::StrCat("kv basis: dsyevd failed (info ", info,
                                                ") at layer ", groups[g].first));
      }
      KvBasis::Block blk;
      blk.first_layer = groups[g].first;
      blk.layers = groups[g].second;
      blk.dim = dim;
      blk.mean.resize(dim);
      blk.variance.resize(dim);
      blk.axes.resize(size_t(dim) * dim);
      for (int i = 0; i < dim; ++i) blk.mean[i] = float(sum[i] / n);
      // Eigenvalues ascend; eigenvector j is column j (contiguous).
      for (int i = 0; i < dim; ++i) {
        const int j = dim - 1 - i;
        blk.variance[i] = float(std::max(w[j], 0.0));
        const double* v = a.data() + size_t(j) * dim;
        for (int c = 0; c < dim; ++c) {
          blk.axes[size_t(i) * dim + c] = HalfToFloat(FloatToHalf(float(v[c])));  // the file's
        }
      }
      b.blocks_.push_back(std::move(blk));
    }
  }
  b.id_ = Fnv1a64(b.Serialize());
  return b;
}

}  // namespace kvcast::kvcache::xl

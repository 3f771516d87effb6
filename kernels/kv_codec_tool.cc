// kv_codec_tool: runs the KV wire codecs on files, so that independent
// implementations (kv_codec_oracle_test.py: numpy, ml_dtypes) can check them.
//
//   kv_codec_tool [--scalar] encode FORMAT NUM_HEADS HEAD_DIM BLOCK IN.f32 OUT.bin
//   kv_codec_tool [--scalar] decode FORMAT NUM_HEADS HEAD_DIM BLOCK IN.bin OUT.f32
//   kv_codec_tool to_codes FORMAT IN.f32 OUT.bin
//   kv_codec_tool from_codes FORMAT IN.bin OUT.f32
//
// encode/decode work on whole rows (kv_codec.h), as many as the input holds;
// --scalar runs them on the portable kernels instead of the CPU's fastest.
// to_codes/from_codes convert single values without scales: fp16 and bf16
// as 2 bytes little-endian, fp8_e4m3 as 1 byte, fp4_e2m1 as 1 byte holding
// the code in its low nibble. FORMAT is fp16, bf16, fp8_e4m3, int8, fp4_e2m1
// or int4. float32 files are little-endian. Exits 2 on bad usage or input.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "kernels/internal/kv_codec_kernels.h"
#include "kernels/kv_codec.h"

namespace kvcast {
namespace {

std::optional<KvFormat> ParseFormat(const std::string& name) {
  if (name == "fp16") return KvFormat::kFp16;
  if (name == "bf16") return KvFormat::kBf16;
  if (name == "fp8_e4m3") return KvFormat::kFp8E4M3;
  if (name == "int8") return KvFormat::kInt8;
  if (name == "fp4_e2m1") return KvFormat::kFp4E2M1;
  if (name == "int4") return KvFormat::kInt4;
  return std::nullopt;
}

int Fail(const std::string& message) {
  std::cerr << "kv_codec_tool: " << message << "\n";
  return 2;
}

bool ReadFile(const std::string& path, std::vector<uint8_t>* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

bool WriteFile(const std::string& path, const void* data, size_t bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  return static_cast<bool>(out);
}

std::vector<float> AsFloats(const std::vector<uint8_t>& bytes) {
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

int Rows(const kv_internal::KvKernels& kernels, bool encode, KvFormat format, int heads, int dim,
         int block, const std::string& in_path, const std::string& out_path) {
  if (heads <= 0 || dim <= 0) return Fail("NUM_HEADS and HEAD_DIM must be positive");
  if (KvFormatScaled(format) &&
      (block <= 0 || dim % block != 0 || (KvFormatBits(format) == 4 && dim % 2 != 0))) {
    return Fail("BLOCK must divide HEAD_DIM (and 4-bit formats need an even HEAD_DIM)");
  }
  std::vector<uint8_t> in;
  if (!ReadFile(in_path, &in)) return Fail("cannot read " + in_path);
  const size_t values = size_t(heads) * dim, row_bytes = KvRowBytes(format, heads, dim, block);
  const size_t in_row = encode ? values * sizeof(float) : row_bytes;
  if (in.size() % in_row != 0) return Fail(in_path + " does not hold whole rows");
  const size_t rows = in.size() / in_row;
  if (encode) {
    const std::vector<float> x = AsFloats(in);
    std::vector<uint8_t> out(rows * row_bytes);
    for (size_t r = 0; r < rows; ++r) {
      kv_internal::EncodeKvRowWith(kernels, format, x.data() + r * values, heads, dim, block,
                                   out.data() + r * row_bytes);
    }
    return WriteFile(out_path, out.data(), out.size()) ? 0 : Fail("cannot write " + out_path);
  }
  std::vector<float> out(rows * values);
  for (size_t r = 0; r < rows; ++r) {
    kv_internal::DecodeKvRowWith(kernels, format, in.data() + r * row_bytes, heads, dim, block,
                                 out.data() + r * values);
  }
  return WriteFile(out_path, out.data(), out.size() * sizeof(float))
             ? 0
             : Fail("cannot write " + out_path);
}

int Codes(bool to_codes, KvFormat format, const std::string& in_path, const std::string& out_path) {
  if (format == KvFormat::kInt8 || format == KvFormat::kInt4) {
    return Fail("integer formats have no unscaled values");
  }
  const size_t code_bytes = KvFormatBits(format) == 16 ? 2 : 1;
  std::vector<uint8_t> in;
  if (!ReadFile(in_path, &in)) return Fail("cannot read " + in_path);
  if (to_codes) {
    if (in.size() % sizeof(float) != 0) return Fail(in_path + " does not hold float32 values");
    const std::vector<float> x = AsFloats(in);
    std::vector<uint8_t> out(x.size() * code_bytes);
    for (size_t i = 0; i < x.size(); ++i) {
      switch (format) {
        case KvFormat::kFp16:
        case KvFormat::kBf16: {
          const uint16_t v = format == KvFormat::kFp16 ? FloatToHalf(x[i]) : FloatToBFloat16(x[i]);
          out[2 * i] = static_cast<uint8_t>(v);
          out[2 * i + 1] = static_cast<uint8_t>(v >> 8);
          break;
        }
        case KvFormat::kFp8E4M3:
          out[i] = FloatToFp8E4M3(x[i]);
          break;
        default:
          out[i] = FloatToFp4E2M1(x[i]);
      }
    }
    return WriteFile(out_path, out.data(), out.size()) ? 0 : Fail("cannot write " + out_path);
  }
  if (in.size() % code_bytes != 0) return Fail(in_path + " does not hold whole codes");
  std::vector<float> out(in.size() / code_bytes);
  for (size_t i = 0; i < out.size(); ++i) {
    switch (format) {
      case KvFormat::kFp16:
        out[i] = HalfToFloat(in[2 * i] | in[2 * i + 1] << 8);
        break;
      case KvFormat::kBf16:
        out[i] = BFloat16ToFloat(in[2 * i] | in[2 * i + 1] << 8);
        break;
      case KvFormat::kFp8E4M3:
        out[i] = Fp8E4M3ToFloat(in[i]);
        break;
      default:
        out[i] = Fp4E2M1ToFloat(in[i]);
    }
  }
  return WriteFile(out_path, out.data(), out.size() * sizeof(float))
             ? 0
             : Fail("cannot write " + out_path);
}

int Main(int argc, char** argv) {
  const std::string usage =
      "usage: kv_codec_tool [--scalar] encode|decode FORMAT NUM_HEADS HEAD_DIM BLOCK IN OUT\n"
      "       kv_codec_tool to_codes|from_codes FORMAT IN OUT";
  const kv_internal::KvKernels* kernels = &kv_internal::ActiveKvKernels();
  if (argc > 1 && std::string(argv[1]) == "--scalar") {
    kernels = &kv_internal::ScalarKvKernels();
    --argc;
    ++argv;
  }
  if (argc < 2) return Fail(usage);
  const std::string mode = argv[1];
  const std::optional<KvFormat> parsed = argc > 2 ? ParseFormat(argv[2]) : std::nullopt;
  if (!parsed) return Fail(usage);
  const KvFormat format = *parsed;
  if ((mode == "encode" || mode == "decode") && argc == 8) {
    return Rows(*kernels, mode == "encode", format, std::atoi(argv[3]), std::atoi(argv[4]),
                std::atoi(argv[5]), argv[6], argv[7]);
  }
  if ((mode == "to_codes" || mode == "from_codes") && argc == 5) {
    return Codes(mode == "to_codes", format, argv[3], argv[4]);
  }
  return Fail(usage);
}

}  // namespace
}  // namespace kvcast

int main(int argc, char** argv) { return kvcast::Main(argc, argv); }

// Test helpers: writes the deterministic tiny checkpoint into the test's
// temporary directory and opens it on the CPU backend.
#ifndef KVCAST_ENGINE_TESTING_TINY_MODEL_FIXTURE_H_
#define KVCAST_ENGINE_TESTING_TINY_MODEL_FIXTURE_H_

#include <memory>
#include <string>

#include "engine/model/checkpoint.h"
#include "engine/transformer.h"
#include "kernels/backend.h"
#include "tools/tiny_model/tiny_model.h"

namespace kvcast {

// Writes the model for `options` (once per options within a test binary) and
// returns its directory. Aborts the test binary on failure.
std::string TinyModelDir(const TinyModelOptions& options = TinyModelOptions());

// A loaded tiny model: checkpoint, CPU backend and transformer.
struct LoadedTinyModel {
  std::unique_ptr<Checkpoint> checkpoint;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Transformer> model;
};
LoadedTinyModel LoadTinyModel(const TinyModelOptions& options = TinyModelOptions());

}  // namespace kvcast

#endif  // KVCAST_ENGINE_TESTING_TINY_MODEL_FIXTURE_H_

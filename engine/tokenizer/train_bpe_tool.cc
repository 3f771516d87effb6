// train_bpe_tool: TrainByteLevelBpeTokenizerJson as a command.
//
//   train_bpe_tool <vocab_size> < corpus.txt > tokenizer.json
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "engine/tokenizer/bpe_trainer.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: train_bpe_tool <vocab_size> < corpus > tokenizer.json\n";
    return 2;
  }
  std::stringstream corpus;
  corpus << std::cin.rdbuf();
  auto json = kvcast::TrainByteLevelBpeTokenizerJson(corpus.str(), std::atoi(argv[1]));
  if (!json.ok()) {
    std::cerr << json.status().ToString() << "\n";
    return 1;
  }
  std::cout << *json;
  return 0;
}

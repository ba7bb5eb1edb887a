// tdist-trace DIR|FILE...: merges the flight recorder dumps of a job's ranks
// (TDIST_TRACE_DIR, tdist::dump_trace) and says in a few lines what went
// wrong: the last call every rank completed, the first call where ranks
// disagree or one is missing, the rank that is behind, and who arrived last.
// --chrome OUT also writes the calls as a Chrome trace (docs/debugging.md).

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "tdist/trace.h"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  CLI::App app{"Merges tdist flight recorder dumps and names the rank that is behind (docs/debugging.md)"};
  std::vector<std::string> inputs;
  std::string chrome;
  app.add_option("inputs", inputs, "directories of dumps (rank<R>.json) or dump files")->required();
  app.add_option("--chrome", chrome,
                 "also write the calls as a Chrome trace (Perfetto opens it) to this file");
  CLI11_PARSE(app, argc, argv);
  try {
    std::vector<std::string> files;
    for (const auto& input : inputs) {
      if (fs::is_directory(input)) {
        std::vector<std::string> found;
        for (const auto& entry : fs::directory_iterator(input)) {
          const auto name = entry.path().filename().string();
          if (name.rfind("rank", 0) == 0 && entry.path().extension() == ".json")
            found.push_back(entry.path());
        }
        if (found.empty()) throw std::runtime_error(input + " holds no rank*.json dump");
        std::sort(found.begin(), found.end());
        files.insert(files.end(), found.begin(), found.end());
      } else {
        files.push_back(input);
      }
    }
    std::vector<std::string> texts;
    for (const auto& file : files) {
      std::ifstream in(file);
      if (!in) throw std::runtime_error("cannot read " + file);
      std::stringstream buffer;
      buffer << in.rdbuf();
      texts.push_back(buffer.str());
    }
    std::cout << tdist::summarize_traces(texts, files);
    if (!chrome.empty()) {
      std::ofstream out(chrome);
      out << tdist::chrome_trace(texts, files) << '\n';
      if (!out) throw std::runtime_error("cannot write " + chrome);
      std::cout << "Chrome trace written to " << chrome << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "tdist-trace: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

// Runs the built `hearth` binary as a user would, for the CLI tests: exit status, stdout, stderr.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <doctest/doctest.h>

namespace fs = std::filesystem;

namespace cli_test {

inline const std::string kModels = std::string(HEARTH_SHARED_DIR) + "/fixtures/models/";

struct Result {
  int status = -1;
  bool signaled = false;
  std::string out, err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline fs::path temp_dir() {
  static int n = 0;
  fs::path p = fs::temp_directory_path() /
               ("hearth_cli_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
  fs::create_directories(p);
  return p;
}

// args may end with shell redirections of stdin ("< FILE"); without one, stdin is /dev/null.
inline Result run(const std::string& args) {
  fs::path d = temp_dir();
  const bool own_stdin = args.find('<') != std::string::npos;
  std::string cmd = std::string("timeout 60 ") + HEARTH_BINARY + " " + args +
                    (own_stdin ? "" : " </dev/null") + " >" + (d / "out").string() + " 2>" +
                    (d / "err").string();
  int st = std::system(cmd.c_str());
  Result r;
  if (WIFEXITED(st)) r.status = WEXITSTATUS(st);
  r.signaled = WIFSIGNALED(st) || r.status > 128 || r.status == 124;
  r.out = slurp((d / "out").string());
  r.err = slurp((d / "err").string());
  fs::remove_all(d);
  return r;
}

inline void expect_error(const std::string& args, const std::string& needle) {
  CAPTURE(args);
  Result r = run(args);
  CHECK(r.status != 0);
  CHECK(!r.signaled);
  CHECK(r.err.rfind("error: ", 0) == 0);
  CHECK(r.err.find(needle) != std::string::npos);
  CAPTURE(r.err);
}

}  // namespace cli_test

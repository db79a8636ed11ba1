// hearth: the command-line front end. Every failure ends as one `error:` line and a non-zero exit.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "core/error.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/help.h"

namespace {

using Command = int (*)(int, char**);

struct Entry {
  const char* name;
  Command run;
};

const Entry kCommands[] = {
    {"run", hearth::cli::cmd_run},
    {"chat", hearth::cli::cmd_chat},
    {"serve", hearth::cli::cmd_serve},
    {"quantize", hearth::cli::cmd_quantize},
    {"eval", hearth::cli::cmd_eval},
    {"bench", hearth::cli::cmd_bench},
    {"standin", hearth::cli::cmd_standin},
    {"generate", hearth::cli::cmd_generate},
    {"logits", hearth::cli::cmd_logits},
    {"tokenize", hearth::cli::cmd_tokenize},
    {"detokenize", hearth::cli::cmd_detokenize},
    {"template", hearth::cli::cmd_template},
    {"bench-tokenizer", hearth::cli::cmd_bench_tokenizer},
    {"devices", hearth::cli::cmd_devices},
};

bool is_help(const char* a) {
  return !std::strcmp(a, "--help") || !std::strcmp(a, "-h");
}

// `hearth help`, `hearth help CMD`, `hearth --version`, `hearth version`; -1 when argv is none.
int meta_command(int argc, char** argv) {
  using namespace hearth::cli;
  const std::string a = argv[1];
  if (a == "--version" || a == "-V" || a == "version") {
    std::fputs(version_text().c_str(), stdout);
    return 0;
  }
  if (a == "help" || is_help(argv[1])) {
    if (argc > 2) {
      const CommandHelp* h = find_command_help(argv[2]);
      if (!h) {
        std::fprintf(stderr, "error: unknown command '%s' (see hearth --help)\n", argv[2]);
        return 2;
      }
      std::fputs(h->page, stdout);
      return 0;
    }
    std::fputs(overview_help().c_str(), stdout);
    return 0;
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hearth::cli;
  if (argc < 2) {
    std::fputs(overview_help().c_str(), stderr);
    return 2;
  }
  if (int st = meta_command(argc, argv); st >= 0) return st;
  const std::string cmd = argv[1];
  const Entry* entry = nullptr;
  for (const Entry& e : kCommands)
    if (cmd == e.name) entry = &e;
  if (!entry) {
    std::vector<std::string> names;
    for (const Entry& e : kCommands) names.push_back(std::string("--") + e.name);
    const std::string near = nearest_option("--" + cmd, names);
    if (!near.empty())
      std::fprintf(stderr, "error: unknown command '%s' (did you mean %s?)\n", cmd.c_str(),
                   near.c_str() + 2);
    else
      std::fprintf(stderr, "error: unknown command '%s' (see hearth --help)\n", cmd.c_str());
    return 2;
  }
  // --help anywhere before a "--" shows the command's page instead of running it.
  for (int i = 2; i < argc && std::strcmp(argv[i], "--"); ++i)
    if (is_help(argv[i])) {
      std::fputs(find_command_help(cmd)->page, stdout);
      return 0;
    }
  try {
    const int status = entry->run(argc - 2, argv + 2);
    // Output nobody got (a full disk, a closed pipe) is a failure, not a success.
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
      std::fprintf(stderr, "error: cannot write the output: %s\n", std::strerror(errno));
      return 1;
    }
    return status;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 1;
}

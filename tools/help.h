// The CLI's help: a short overview (`hearth --help`), each command's own page
// (`hearth COMMAND --help`), and the version report (`hearth --version`). The man page is generated
// from these same texts at build time (cmake/man_page.cmake).
#pragma once
#include <string>
#include <vector>

namespace hearth::cli {

struct CommandHelp {
  const char* name;
  const char* summary;  // one line, for the overview
  const char* page;     // usage, options with defaults, an example
};

const std::vector<CommandHelp>& command_help();
const CommandHelp* find_command_help(const std::string& name);
std::string overview_help();
// Version, build type, the ISAs compiled in (and the one this CPU gets), the backends available.
std::string version_text();

}  // namespace hearth::cli

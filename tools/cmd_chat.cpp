// hearth chat: an interactive conversation. The session keeps its KV cache between turns, so each
// turn computes only the tokens that changed; Ctrl-C stops the current answer.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <string>

#include "tools/commands.h"
#include "tools/loaded.h"
#include "tools/text.h"

namespace hearth::cli {

void print_metrics(const GenerationResult& r);  // cmd_run.cpp

namespace {

// A signal handler can only reach static storage; this flag is the CLI's, not the library's.
std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) {
  g_interrupted.store(true);
}

Json message(const std::string& role, const std::string& content) {
  return Json(Json::Object{{"role", Json(role)}, {"content", Json(content)}});
}

}  // namespace

int cmd_chat(int argc, char** argv) {
  auto spec = kEngineOptions;
  auto so = sampling_options();
  spec.insert(spec.end(), so.begin(), so.end());
  spec.insert(spec.end(), {"--system=", "--no-thinking", "--hide-thinking"});
  Args args(argc, argv, spec);
  Loaded l = load_engine(args);
  TextFrontEnd text = TextFrontEnd::load(l.model->dir());
  GenerateOptions opt = generate_options(args, *l.model, /*model_defaults=*/true);
  if (!args.has("--max-new-tokens")) opt.max_new_tokens = 1024;
  opt.stop_ids = text.stop_ids(opt.stop_ids);
  bool thinking = !args.has("--no-thinking");
  const bool hide_thinking = args.has("--hide-thinking");

  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: Ctrl-C at the prompt interrupts the read
  sigaction(SIGINT, &sa, nullptr);

  Json history = Json::array();
  if (args.has("--system")) history.as_array().push_back(message("system", args.str("--system")));
  Session session(*l.engine);
  std::fprintf(stderr, "hearth chat (%s). Commands: /reset /thinking on|off /exit\n",
               l.runner->backend().describe().c_str());
  for (;;) {
    std::fputs("\n> ", stdout);
    std::fflush(stdout);
    std::string line;
    g_interrupted = false;
    if (!std::getline(std::cin, line)) {
      if (g_interrupted) {  // Ctrl-C at the prompt: a fresh prompt, like a shell
        std::cin.clear();
        continue;
      }
      break;  // end of input
    }
    if (line.empty()) continue;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      history = Json::array();
      if (args.has("--system"))
        history.as_array().push_back(message("system", args.str("--system")));
      session.reset();
      std::fputs("(conversation cleared)\n", stdout);
      continue;
    }
    if (line == "/thinking on" || line == "/thinking off") {
      thinking = line == "/thinking on";
      std::printf("(thinking %s)\n", thinking ? "on" : "off");
      continue;
    }
    if (line[0] == '/') {
      std::fputs("commands: /reset /thinking on|off /exit\n", stdout);
      continue;
    }
    history.as_array().push_back(message("user", line));
    ChatOptions co;
    co.enable_thinking = thinking;
    const std::vector<int32_t> ids = text.tokenizer.encode(text.chat.render(history, co));
    AnswerPrinter printer(text, hide_thinking);
    g_interrupted = false;
    GenerationResult r = session.generate(
        ids, opt,
        [&](int32_t id) {
          printer.token(id);
          return true;
        },
        &g_interrupted);
    printer.finish();
    if (r.finish_reason == "cancelled") std::fputs(" [stopped]", stdout);
    std::fputs("\n", stdout);
    print_metrics(r);
    // The template re-renders the reply from its text (dropping old reasoning as it should); the
    // session recomputes only from where that differs from what it generated.
    history.as_array().push_back(message("assistant", printer.answer()));
  }
  return 0;
}

}  // namespace hearth::cli

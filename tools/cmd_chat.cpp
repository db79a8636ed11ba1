// hearth chat: an interactive conversation. The session keeps its KV cache between turns and the
// conversation continues its exact ids (models/conversation.h), so each turn computes only its new
// tokens; when the context is full the oldest turns are dropped. Ctrl-C stops the current answer.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "models/conversation.h"
#include "tools/commands.h"
#include "tools/line_reader.h"
#include "tools/loaded.h"
#include "tools/text.h"

namespace hearth::cli {

void print_metrics(const Loaded& l, const GenerationResult& r);  // cmd_run.cpp

namespace {

const char* kChatCommands =
    "/help               these commands\n"
    "/reset              start a new conversation (keeps the system prompt)\n"
    "/thinking on|off    switch thinking\n"
    "/save FILE          write the conversation as a JSON array of messages\n"
    "/load FILE          continue a conversation saved with /save\n"
    "/exit               leave (or Ctrl-D); Ctrl-C stops an answer\n";

struct ChatState {
  const Loaded& l;
  const TextFrontEnd& text;
  Conversation conversation;
  Session session;
  GenerateOptions opt;
  std::vector<std::string> stops;
  int answer_tokens;  // --max-new-tokens, or 0 for the default of the thinking mode
  bool thinking, hide_thinking, colour;
};

std::string sampling_summary(const SamplingParams& s) {
  char buf[160];
  if (s.temperature <= 0) return "greedy";
  std::snprintf(buf, sizeof buf, "temperature %g, top-k %d, top-p %g, min-p %g, seed %llu",
                double(s.temperature), s.top_k, double(s.top_p), double(s.min_p),
                static_cast<unsigned long long>(s.seed));
  return buf;
}

void print_banner(const ChatState& c) {
  const Qwen3Model& m = *c.l.model;
  std::fprintf(stderr, "hearth chat: %s (%s%s), context %d tokens\n", m.dir().c_str(),
               m.weight_dtypes().c_str(), m.config().random_weights ? ", random weights" : "",
               context_positions(c.l));
  std::fprintf(stderr, "sampling: %s; thinking %s; %s\n", sampling_summary(c.opt.sampling).c_str(),
               c.thinking ? "on" : "off", c.l.runner->backend().describe().c_str());
  note_random_weights(m);
  std::fputs("/help lists the commands\n", stderr);
}

void save(const ChatState& c, const std::string& path) {
  std::ofstream f(path, std::ios::binary);
  f << c.conversation.messages().dump_python(2) << "\n";
  if (!f.flush()) fail("/save: cannot write ", path);
  std::printf("(saved %zu messages to %s)\n", c.conversation.messages().as_array().size(),
              path.c_str());
}

void load(ChatState& c, const std::string& path) {
  Json messages;
  try {
    messages = Json::parse(read_text(path, "/load"));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("/load ", path, ": ", e.what());
  }
  c.conversation.set_messages(std::move(messages));
  c.session.reset();
  std::printf("(loaded %zu messages from %s)\n", c.conversation.messages().as_array().size(),
              path.c_str());
}

// A line starting with '/'. Returns false for /exit.
bool command(ChatState& c, const std::string& line) {
  std::istringstream in(line);
  std::string cmd, arg;
  in >> cmd;
  std::getline(in >> std::ws, arg);
  if (cmd == "/exit" || cmd == "/quit") return false;
  if (cmd == "/reset") {
    c.conversation.reset();
    c.session.reset();
    std::puts("(conversation cleared)");
  } else if (cmd == "/thinking" && (arg == "on" || arg == "off")) {
    c.thinking = arg == "on";
    std::printf("(thinking %s)\n", arg.c_str());
  } else if ((cmd == "/save" || cmd == "/load") && !arg.empty()) {
    try {
      cmd == "/save" ? save(c, arg) : load(c, arg);
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
    }
  } else {
    std::fputs(cmd == "/help" ? kChatCommands : "unknown command; /help lists them\n", stdout);
  }
  return true;
}

void turn(ChatState& c, const std::string& user, std::atomic<bool>& interrupted) {
  const int ctx = context_positions(c.l);
  const int want = c.answer_tokens > 0 ? c.answer_tokens : default_answer_tokens(c.thinking);
  ChatOptions co;
  co.enable_thinking = c.thinking;
  // Room for at least a quarter of the context's worth of answer before old turns must go.
  const Conversation::Turn t = c.conversation.prepare(user, co, ctx, std::min(want, ctx / 4));
  if (t.dropped_messages > 0)
    std::fprintf(stderr, "(the context is full: left out the oldest %d messages)\n",
                 t.dropped_messages);
  GenerateOptions opt = c.opt;
  opt.max_new_tokens = std::min(want, ctx - int(t.prompt.size()));
  AnswerPrinter printer(c.text, c.hide_thinking, c.stops);
  interrupted = false;
  GenerationResult r = c.session.generate(
      t.prompt, opt, [&](int32_t id) { return printer.token(id); }, &interrupted);
  printer.finish();
  if (r.finish_reason == "cancelled") std::fputs(" [stopped]", stdout);
  std::fputs("\n", stdout);
  if (printer.stopped_by_string()) r.finish_reason = "stop";
  print_metrics(c.l, r);
  c.conversation.commit(t, r.tokens, printer.answer());
}

}  // namespace

int cmd_chat(int argc, char** argv) {
  auto spec = kEngineOptions;
  auto so = sampling_options();
  spec.insert(spec.end(), so.begin(), so.end());
  spec.insert(spec.end(), {"--system=", "--system-file=", "--thinking", "--no-thinking",
                           "--hide-thinking", "--stop=*"});
  Args args(argc, argv, spec);
  const std::optional<std::string> system = read_system_prompt(args);
  const bool thinking = thinking_flag(args).value_or(true);
  TextFrontEnd text = load_text(args);
  Loaded l = load_engine(args);
  GenerateOptions opt = generate_options(args, *l.model, /*model_defaults=*/true);
  opt.stop_ids = text.stop_ids(opt.stop_ids);
  ChatState c{l,
              text,
              Conversation(text, system),
              Session(*l.engine),
              opt,
              args.all("--stop"),
              args.has("--max-new-tokens") ? std::max(1, opt.max_new_tokens) : 0,
              thinking,
              args.has("--hide-thinking"),
              use_colour(stdout)};
  print_banner(c);
  LineReader reader(c.colour);
  std::atomic<bool>& interrupted = catch_ctrl_c();
  for (;;) {
    const LineReader::Input in = reader.read();
    if (in.status == LineReader::Status::End) break;
    if (in.status == LineReader::Status::Interrupted || in.text.empty()) continue;
    if (in.text[0] == '/') {
      if (!command(c, in.text)) break;
      continue;
    }
    try {
      turn(c, in.text, interrupted);
    } catch (const Error& e) {  // this turn fails; the conversation goes on
      std::fprintf(stderr, "error: %s\n", e.what());
    }
  }
  return 0;
}

}  // namespace hearth::cli

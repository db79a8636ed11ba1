#include "tools/serve_reply.h"

#include <algorithm>

#include "core/error.h"
#include "models/json_value.h"

namespace hearth::serve {

namespace {

constexpr const char* kThinkOpen = "<think>";
constexpr const char* kThinkClose = "</think>";
constexpr const char* kToolOpen = "<tool_call>";
constexpr const char* kToolClose = "</tool_call>";

// Length of the longest proper prefix of `tag` that `s` ends with: text that may be a tag's start.
size_t partial_suffix(const std::string& s, const std::string& tag) {
  for (size_t k = std::min(s.size(), tag.size() - 1); k > 0; --k)
    if (s.compare(s.size() - k, k, tag, 0, k) == 0) return k;
  return 0;
}

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

}  // namespace

ReplyParser::ReplyParser(const Options& opt) : opt_(opt) {
  state_ = opt.starts_in_reasoning ? State::Reasoning
           : opt.reasoning         ? State::Start
                                   : State::Content;
  strip_newlines_ = opt.starts_in_reasoning;
}

void ReplyParser::emit(ReplyDelta::Kind kind, std::string text, std::vector<ReplyDelta>& out) {
  if (strip_newlines_) {
    size_t i = 0;
    while (i < text.size() && is_space(text[i])) ++i;
    text.erase(0, i);
    if (text.empty()) return;
    strip_newlines_ = false;
  }
  // Whitespace just before a tag is dropped, so hold it until text follows. Plain content (no
  // tools to look for) is passed through untouched.
  const bool hold = kind == ReplyDelta::Kind::Reasoning || opt_.tool_calls;
  if (hold) {
    text = pending_space_ + text;
    size_t end = text.size();
    while (end > 0 && is_space(text[end - 1])) --end;
    pending_space_ = text.substr(end);
    text.resize(end);
  }
  if (text.empty()) return;
  if (!out.empty() && out.back().kind == kind && kind != ReplyDelta::Kind::ToolCall)
    out.back().text += text;
  else
    out.push_back({kind, std::move(text), {}});
}

bool ReplyParser::step(std::vector<ReplyDelta>& out) {
  switch (state_) {
    case State::Start: {
      size_t i = 0;
      while (i < buf_.size() && is_space(buf_[i])) ++i;
      const std::string rest = buf_.substr(i);
      if (rest.rfind(kThinkOpen, 0) == 0) {
        buf_.erase(0, i + std::string(kThinkOpen).size());
        state_ = State::Reasoning;
        strip_newlines_ = true;
        return true;
      }
      if (std::string(kThinkOpen).rfind(rest, 0) == 0) return false;  // "", "<", "<th", ...
      state_ = State::Content;
      return true;
    }
    case State::Reasoning:
    case State::Content: {
      const bool reasoning = state_ == State::Reasoning;
      if (!reasoning && !opt_.tool_calls) {
        emit(ReplyDelta::Kind::Content, std::move(buf_), out);
        buf_.clear();
        return false;
      }
      const std::string tag = reasoning ? kThinkClose : kToolOpen;
      const auto kind = reasoning ? ReplyDelta::Kind::Reasoning : ReplyDelta::Kind::Content;
      const size_t at = buf_.find(tag);
      if (at == std::string::npos) {
        const size_t keep = partial_suffix(buf_, tag);
        emit(kind, buf_.substr(0, buf_.size() - keep), out);
        buf_.erase(0, buf_.size() - keep);
        return false;
      }
      emit(kind, buf_.substr(0, at), out);
      buf_.erase(0, at + tag.size());
      pending_space_.clear();
      strip_newlines_ = true;
      state_ = reasoning ? State::Content : State::ToolCall;
      return true;
    }
    case State::ToolCall: {
      const size_t at = buf_.find(kToolClose);
      if (at == std::string::npos) return false;
      end_tool_call(out);
      return true;
    }
  }
  return false;
}

void ReplyParser::end_tool_call(std::vector<ReplyDelta>& out) {
  const size_t at = buf_.find(kToolClose);
  const std::string body = buf_.substr(0, at);
  buf_.erase(0, at == std::string::npos ? buf_.size() : at + std::string(kToolClose).size());
  state_ = State::Content;
  ToolCall call;
  if (at != std::string::npos && parse_tool_call(body, call)) {
    ++n_calls_;
    out.push_back({ReplyDelta::Kind::ToolCall, {}, std::move(call)});
    strip_newlines_ = true;
    return;
  }
  // Not a call after all (or cut off): the model's text, as it wrote it.
  std::string text = std::string(kToolOpen) + body;
  if (at != std::string::npos) text += kToolClose;
  strip_newlines_ = false;
  out.push_back({ReplyDelta::Kind::Content, std::move(text), {}});
}

void ReplyParser::push(const std::string& text, std::vector<ReplyDelta>& out) {
  buf_ += text;
  while (step(out)) {
  }
}

void ReplyParser::finish(std::vector<ReplyDelta>& out) {
  while (step(out)) {
  }
  switch (state_) {
    case State::Start:
      state_ = State::Content;
      emit(ReplyDelta::Kind::Content, std::move(buf_), out);
      break;
    case State::ToolCall:
      end_tool_call(out);
      break;
    case State::Reasoning:
    case State::Content: {
      // A reply that ends in the middle of a tag's spelling: that text is the reply's.
      const auto kind =
          state_ == State::Reasoning ? ReplyDelta::Kind::Reasoning : ReplyDelta::Kind::Content;
      std::string rest = pending_space_ + buf_;
      pending_space_.clear();
      strip_newlines_ = strip_newlines_ && rest.find_first_not_of(" \n\t\r") == std::string::npos;
      if (!rest.empty() && !strip_newlines_) {
        if (!out.empty() && out.back().kind == kind)
          out.back().text += rest;
        else
          out.push_back({kind, std::move(rest), {}});
      }
      break;
    }
  }
  buf_.clear();
}

bool parse_tool_call(const std::string& json, ToolCall& call) {
  try {
    const Json v = Json::parse(json);
    if (!v.is_object()) return false;
    const Json* name = v.find("name");
    const Json* args = v.find("arguments");
    if (!name || !name->is_string() || name->as_string().empty()) return false;
    call.name = name->as_string();
    if (!args || args->is_null())
      call.arguments = "{}";
    else if (args->is_string())  // already JSON text
      call.arguments = args->as_string();
    else
      call.arguments = args->dump_python();
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace hearth::serve

// The hearth subcommands. Each takes the arguments after its name and returns an exit status;
// errors are thrown as hearth::Error and printed by main as one `error:` line.
#pragma once

namespace hearth::quant {
struct QuantizeOptions;
}

namespace hearth::cli {

class Args;

int cmd_logits(int argc, char** argv);
int cmd_generate(int argc, char** argv);
int cmd_standin(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_chat(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_detokenize(int argc, char** argv);
int cmd_template(int argc, char** argv);
int cmd_bench_tokenizer(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_devices(int argc, char** argv);

// --bits, --group, --scale-dtype, --head and --rtn, as hearth quantize and hearth standin take
// them.
void parse_quant_scheme(const Args& args, quant::QuantizeOptions* o);

}  // namespace hearth::cli

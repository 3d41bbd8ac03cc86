// The subcommands of the hytra CLI, one function each (argv[0] is the subcommand name).
#pragma once

namespace hytra {

int cmd_train(int argc, char** argv);
int cmd_inspect_pattern(int argc, char** argv);
int cmd_ops(int argc, char** argv);
int cmd_preprocess(int argc, char** argv);
int cmd_inspect_data(int argc, char** argv);
int cmd_inspect_checkpoint(int argc, char** argv);
int cmd_eval_step(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_convert(int argc, char** argv);
int cmd_generate(int argc, char** argv);

}  // namespace hytra

/* commands.h: the subcommands of the specula CLI, one file each (cmd_<name>.c). */
#ifndef SP_TOOLS_COMMANDS_H
#define SP_TOOLS_COMMANDS_H

#include "specula.h"

int cmd_logits(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_bench_tokenizer(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_trace(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);

int cmd_template(int argc, char **argv);

/* Renders a chat context file with PATH's chat template and prints the ids of the text
 * (cmd_template.c). */
int cli_tokenize_chat(sp_tokenizer *t, const char *path, const char *context_path);

#endif

/* commands.h: the subcommands of the specula CLI, one file each (cmd_<name>.c). */
#ifndef SP_TOOLS_COMMANDS_H
#define SP_TOOLS_COMMANDS_H

int cmd_logits(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_bench_tokenizer(int argc, char **argv);

struct sp_tokenizer;
/* Renders a chat context file with the tokenizer's chat template and prints its ids
 * (cmd_template.c). */
int cli_tokenize_chat(struct sp_tokenizer *t, const char *context_path);

#endif

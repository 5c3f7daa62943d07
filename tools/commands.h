/* commands.h: the subcommands of the specula CLI, one file each (cmd_<name>.c). */
#ifndef SP_TOOLS_COMMANDS_H
#define SP_TOOLS_COMMANDS_H

int cmd_logits(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_bench(int argc, char **argv);

#endif

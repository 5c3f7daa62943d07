/* specula.c: the command-line entry point: dispatches to one subcommand per file. */
#include "cli.h"
#include "commands.h"

#include <stdio.h>
#include <string.h>

static const cli_cmd commands[] = {
    {"run", "one reply through the chat template (default: the bundled pair, speculating)", NULL, cmd_run},
    {"chat", "a conversation in the terminal, reusing the KV cache across turns", NULL, cmd_chat},
    {"generate", "generate tokens or text from a prompt", NULL, cmd_generate},
    {"logits", "write the logits of every input position to a file", NULL, cmd_logits},
    {"bench", "measure prefill and decode tokens/s", NULL, cmd_bench},
    {"inspect", "what a checkpoint holds: architecture, formats, quantization, input scales", NULL, cmd_inspect},
    {"trace", "per-layer, per-op activation statistics and hashes of every forward pass", NULL, cmd_trace},
    {"diff", "the first layer/op/position where two traces differ", NULL, cmd_diff},
    {"check", "self-tests of a checkpoint (and its draft)", NULL, cmd_check},
    {"serve", "an OpenAI-compatible HTTP server with continuous batching", NULL, cmd_serve},
    {"tokenize", "text to token ids with a tokenizer.json", NULL, cmd_tokenize},
    {"detokenize", "token ids to text", NULL, cmd_detokenize},
    {"template", "render a chat template like transformers' apply_chat_template", NULL, cmd_template},
    {"bench-tokenizer", "tokenizer load time and encode MB/s (optionally vs HF tokenizers)", NULL,
     cmd_bench_tokenizer},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f)
{
    fprintf(f, "specula: LLM inference for Hugging Face checkpoints\n\n"
               "usage: specula <command> [options]   (specula <command> --help for details)\n\n"
               "commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return CLI_OK;
    }
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "specula: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return CLI_USAGE;
}

/* cmd_template.c: chat templates on the command line (specula template, tokenize --chat). */
#include "cli.h"
#include "commands.h"

int cli_tokenize_chat(struct sp_tokenizer *t, const char *context_path)
{
    (void)t;
    return cli_failf("%s: chat templates are not available in this build yet", context_path);
}

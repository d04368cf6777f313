/* cli.h: the subcommands of the turbospark command line.
 *
 * Each subcommand lives in its own tools/cmd_<name>.c and defines
 * `int cmd_<name>(int argc, char **argv)` (argv[0] is the subcommand name);
 * it returns the process exit status. Frontends include only turbospark.h
 * (and this header); they never reach into src/.
 */
#ifndef TS_CLI_H
#define TS_CLI_H

int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);

/* Shared helpers (tools/cli_util.c). */
/* Parse "1,2,3" into ids (caller frees *ids with free()). Returns count or -1. */
int cli_parse_ids(const char *s, int **ids);
/* The default model directory (the bundled install), or NULL if absent. */
const char *cli_default_model(void);

#endif

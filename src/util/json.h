/* json.h: cJSON parsing and typed field access with error messages that name the file
 * and the field. Getters treat a missing key or JSON null as "absent" and fall back to
 * the default; a present value of the wrong type or out of range is an error. */
#ifndef SP_UTIL_JSON_H
#define SP_UTIL_JSON_H

#include "specula.h"
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

/* Parses `len` bytes of text, which must be valid UTF-8; `what` names the source in
 * messages. */
sp_status sp_json_parse(const char *text, size_t len, const char *what, cJSON **out,
                        sp_error *err);
sp_status sp_json_parse_file(const char *path, size_t max_bytes, cJSON **out, sp_error *err);

/* Returns the first key of `obj` that appears twice, or NULL. */
const char *sp_json_duplicate_key(const cJSON *obj);

bool sp_json_absent(const cJSON *obj, const char *key);

sp_status sp_json_int(const cJSON *obj, const char *key, const char *what, int64_t def,
                      int64_t min, int64_t max, int64_t *out, sp_error *err);
sp_status sp_json_int_req(const cJSON *obj, const char *key, const char *what, int64_t min,
                          int64_t max, int64_t *out, sp_error *err);
sp_status sp_json_num(const cJSON *obj, const char *key, const char *what, double def,
                      double min, double max, double *out, sp_error *err);
sp_status sp_json_bool(const cJSON *obj, const char *key, const char *what, bool def,
                       bool *out, sp_error *err);
/* *out is borrowed from obj (or def). */
sp_status sp_json_str(const cJSON *obj, const char *key, const char *what, const char *def,
                      const char **out, sp_error *err);

/* Converts one JSON number to an integer in [min, max]; `field` names it in messages. */
sp_status sp_json_as_int(const cJSON *v, const char *what, const char *field, int64_t min,
                         int64_t max, int64_t *out, sp_error *err);

#endif

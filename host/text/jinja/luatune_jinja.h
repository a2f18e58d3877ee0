/* The C ABI of host/text/jinja (src/lib.rs): MiniJinja set up as transformers sets up Jinja2 for
 * apply_chat_template. Only host/text/chat_template.cpp includes this. Strings in and out are
 * UTF-8 with explicit lengths; every string the library returns is freed by the library. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct LtJinjaHandle LtJinjaHandle;

/* Compiles a template. NULL on error, with *err (free with lt_jinja_free_error) and *err_line (the
 * template's line, 1-based; 0 when unknown). fuel: instructions one render may run (0 = no limit). */
LtJinjaHandle* lt_jinja_compile(const char* source, size_t len, uint64_t fuel, char** err,
                                uint32_t* err_line);
void lt_jinja_free(LtJinjaHandle* handle);
/* 1 when the template has {% generation %} blocks: their output is wrapped in U+E000 ... U+E001. */
int32_t lt_jinja_has_generation(const LtJinjaHandle* handle);
/* Renders with `context` (a JSON object) as the variables; strftime_now reads the local time, or
 * SOURCE_DATE_EPOCH when set. Returns 0 and *out / *out_len (free with lt_jinja_free_output), or
 * non-zero with *err / *err_line. A render whose output passes max_output bytes fails. */
int32_t lt_jinja_render(const LtJinjaHandle* handle, const char* context, size_t len, size_t max_output,
                        char** out, size_t* out_len, char** err, uint32_t* err_line);
void lt_jinja_free_output(char* out, size_t len);
void lt_jinja_free_error(char* err);

#ifdef __cplusplus
}
#endif

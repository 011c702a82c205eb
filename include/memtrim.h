/*
 * memtrim.h - the C ABI of libmemtrim.so, the only public header.
 *
 * memtrim gives freed heap memory back to the system with malloc_trim on a
 * policy, measures every trim and the heap, keeps the history in SQLite and
 * serves it over an embedded HTTP API. A host loads it with dlopen (or links
 * it), starts one instance from a configuration JSON string and stops it
 * before it unloads the library. All functions are thread-safe and never end
 * the process: errors come back as status codes and messages.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MEMTRIM_H
#define MEMTRIM_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MEMTRIM_API __attribute__((visibility("default")))
#else
#define MEMTRIM_API
#endif

#define MEMTRIM_VERSION "0.1.0"
#define MEMTRIM_ABI_VERSION 1

typedef struct memtrim memtrim_t;

/*
 * Start an instance. `config_json` is the "MemoryTrim" section, a document
 * holding it ({"MemoryTrim": {...}}), or NULL/"" for defaults. On success
 * returns 0 and stores the instance in *out. On failure returns a negative
 * errno value (-EINVAL for bad configuration, -EADDRINUSE when the HTTP port
 * is taken, -EBUSY when another instance runs in this process, ...) and, when
 * errmsg is not NULL, stores a message naming what was wrong that the caller
 * releases with memtrim_free(). A configuration with "Enabled": false starts
 * nothing and returns 0 with *out == NULL.
 */
MEMTRIM_API int memtrim_start(const char *config_json, memtrim_t **out, char **errmsg);

/* Stop and free an instance; accepts NULL. Returns within a few hundred ms. */
MEMTRIM_API void memtrim_stop(memtrim_t *mt);

/*
 * Hold off periodic and pressure trims around latency-critical work.
 * Calls nest: trims resume when every suspend has been matched by a resume.
 * Manual trims (HTTP) still run. Return the nesting depth after the call,
 * or a negative errno value (-EINVAL for NULL, -ERANGE for an unmatched resume).
 */
MEMTRIM_API int memtrim_suspend(memtrim_t *mt);
MEMTRIM_API int memtrim_resume(memtrim_t *mt);

/* The port the HTTP server bound (useful with HttpPort 0); -1 when it has none. */
MEMTRIM_API int memtrim_http_port(const memtrim_t *mt);

/* The library version, "major.minor.patch". */
MEMTRIM_API const char *memtrim_version(void);

/* Release a string returned by memtrim (error messages); accepts NULL. */
MEMTRIM_API void memtrim_free(void *p);

#ifdef __cplusplus
}
#endif
#endif /* MEMTRIM_H */

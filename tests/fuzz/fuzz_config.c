/*
 * fuzz_config.c - libFuzzer harness for the configuration parser
 * (core/config/config.c): any bytes go through config_parse and config_patch;
 * whatever parses must print (config_to_json) and parse back to the same
 * values, and no input may crash, leak or leave an error unset.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    struct mt_config cfg, again;
    char *err = NULL;
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';

    if (config_parse(s, &cfg, &err) == 0) {
        if (err != NULL)
            __builtin_trap(); /* success leaves no message */
        cJSON *o = config_to_json(&cfg);
        cJSON_DeleteItemFromObject(o, "AuthToken"); /* redacted: not round-trippable */
        char *text = cJSON_PrintUnformatted(o);
        if (config_parse(text, &again, &err) != 0)
            __builtin_trap(); /* what we print must parse */
        if (again.trim_interval_seconds != cfg.trim_interval_seconds ||
            again.http_port != cfg.http_port ||
            strcmp(again.database, cfg.database) != 0)
            __builtin_trap();
        free(text);
        cJSON_Delete(o);
    } else if (err == NULL) {
        __builtin_trap(); /* every failure says why */
    }
    free(err);
    err = NULL;
    config_defaults(&cfg);
    struct mt_config before = cfg;
    if (config_patch(&cfg, s, &err) != 0 && memcmp(&before, &cfg, sizeof(cfg)) != 0)
        __builtin_trap(); /* a refused patch changes nothing */
    free(err);
    free(s);
    return 0;
}

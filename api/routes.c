/*
 * routes.c - the route table: every resource the server answers, who may
 * call it and which query parameters it takes. Handed to server_start by the
 * instance (the host adapters give it to mt_create) and read by server_dispatch;
 * openapi.yaml must list exactly these (tests/e2e/test_contract.py and
 * tests/unit/test_server_routes.c check it). Constant data: no threads, no locks.
 */
#include "api.h"
#include "http.h"

static const char *const trim_params[] = {"pad", "pid", NULL};
static const char *const trims_params[] = {"since", "until", "limit", "trigger", "pid", NULL};
static const char *const series_params[] = {"metric", "since", "until", "step", "pid", NULL};
static const char *const arenas_params[] = {"max_age", NULL};

static const struct server_route routes[] = {
    {"GET", "/", SERVER_AUTH_NONE, NULL, api_dashboard_get},
    {"GET", "/openapi.yaml", SERVER_AUTH_NONE, NULL, api_openapi_get},
    {"GET", "/healthz", SERVER_AUTH_NONE, NULL, api_healthz_get},
    {"GET", "/memory/stats", SERVER_AUTH_READ, NULL, api_stats_get},
    {"POST", "/memory/trim", SERVER_AUTH_WRITE, trim_params, api_trim_run},
    {"GET", "/memory/trim", SERVER_AUTH_WRITE, trim_params, api_trim_run},
    {"GET", "/memory/trims", SERVER_AUTH_READ, trims_params, api_trims_get},
    {"GET", "/memory/series", SERVER_AUTH_READ, series_params, api_series_get},
    {"GET", "/metrics", SERVER_AUTH_READ, NULL, api_metrics_get},
    {"GET", "/config", SERVER_AUTH_READ, NULL, api_config_get},
    {"PATCH", "/config", SERVER_AUTH_WRITE, NULL, api_config_patch},
    {"GET", "/memory/arenas", SERVER_AUTH_READ, arenas_params, api_arenas_get},
    {"GET", "/memory/doctor", SERVER_AUTH_READ, NULL, api_doctor_get},
};

const struct server_routes api_routes = {routes, sizeof(routes) / sizeof(routes[0])};

/*
 * assets.c - GET / (the dashboard page) and GET /openapi.yaml (the contract),
 * both embedded in the library at build time (cmake/embed.cmake) and sent
 * from that read-only memory without copying. Runs on HTTP worker threads;
 * no state, no locks.
 */
#include "api.h"

extern const unsigned char mt_asset_openapi[];
extern const unsigned long mt_asset_openapi_len;
extern const unsigned char mt_asset_dashboard[];
extern const unsigned long mt_asset_dashboard_len;

int api_dashboard_get(const struct server_request *req, struct server_reply *rep)
{
    server_reply_static(rep, 200, "text/html; charset=utf-8", mt_asset_dashboard,
                        mt_asset_dashboard_len);
    return 0;
}

int api_openapi_get(const struct server_request *req, struct server_reply *rep)
{
    server_reply_static(rep, 200, "application/yaml", mt_asset_openapi, mt_asset_openapi_len);
    return 0;
}

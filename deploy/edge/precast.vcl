vcl 4.1;
# precast's edge cache: Varnish in front of the read API replicas (docs/api.md, "Behind a
# cache or CDN"). It caches only the per-device answers, for as long as the API allows, keyed
# by URL and credentials, and drops them by the surrogate keys every answer carries.
#
# The backends, the `origin` director and the `purgers` ACL come from backends.vcl, written
# per deployment: `precast stack up --edge` writes one for the local replicas,
# deploy/edge/compose-backends.vcl is compose's.

import std;
import xkey;

include "backends.vcl";

sub vcl_recv {
    set req.backend_hint = origin.backend();
    unset req.http.x-precast-edge;
    if (req.url == "/edge/healthz") {
        return (synth(200, "ok"));  # the edge itself, whatever its backends do
    }
    if (req.method == "PURGE") {
        # `precast purge` and the API replicas' newest-wins purges: `xkey-purge: k1 k2 ...`
        if (client.ip !~ purgers) {
            return (synth(403, "purge refused from this address"));
        }
        # xkey-softpurge: the replicas' newest-wins purges. The copy stays usable 0.5 s more
        # (req.grace below): a read then gets it while one background fetch brings the newer
        # answer, instead of every reader waiting for it.
        if (req.http.xkey-softpurge) {
            set req.http.x-purged = xkey.softpurge(req.http.xkey-softpurge);
            return (synth(200, "purged " + req.http.x-purged));
        }
        if (!req.http.xkey-purge) {
            return (synth(400, "PURGE needs an xkey-purge or xkey-softpurge header of surrogate keys"));
        }
        set req.http.x-purged = xkey.purge(req.http.xkey-purge);
        return (synth(200, "purged " + req.http.x-purged));
    }
    if (req.url ~ "^/v1/(stream|board/events)" || req.http.accept ~ "text/event-stream") {
        return (pipe);  # server-sent events: long-lived, never cached
    }
    if ((req.method == "GET" || req.method == "HEAD") &&
        req.url ~ "^/v1/devices/[A-Za-z0-9][A-Za-z0-9._:-]{0,127}/prediction$") {
        unset req.http.cookie;  # answers never depend on cookies
        # stale-while-revalidate for at most 0.5 s past a copy's ttl: after its natural ttl,
        # or after a replica soft-purged it for a newer answer (ttl set to now), one read gets
        # it while one background fetch brings the newer one; later reads wait for the origin
        # (docs/api.md, "The bounds": newest wins within 1 s)
        set req.grace = 0.5s;
        return (hash);  # cached even with Authorization: see vcl_hash
    }
    return (pass);
}

sub vcl_pipe {
    set bereq.http.connection = req.http.connection;
    if (req.http.upgrade) {
        set bereq.http.upgrade = req.http.upgrade;
    }
}

sub vcl_hash {
    hash_data(req.url);
    # One client's answer is never another's: with credentials, the copy is keyed by the
    # token, normalized as the API's own lookup does ("Bearer" in any case, any spaces).
    if (req.http.authorization) {
        hash_data(regsub(req.http.authorization, "^\s*[Bb][Ee][Aa][Rr][Ee][Rr]\s+(\S+)\s*$", "\1"));
    }
    return (lookup);
}

sub vcl_hit {
    if (obj.ttl >= 0s) {
        set req.http.x-precast-edge = "hit";
    } else {
        set req.http.x-precast-edge = "stale";  # within the bounded grace, refreshed behind
    }
}

sub vcl_miss {
    set req.http.x-precast-edge = "miss";
}

sub vcl_pass {
    set req.http.x-precast-edge = "bypass";
}

sub vcl_backend_response {
    if (bereq.url ~ "^/v1/devices/[^/]+/prediction$" && beresp.status == 200 &&
        beresp.http.surrogate-key && beresp.ttl > 0s) {
        set beresp.http.xkey = beresp.http.surrogate-key;
        # The API's max-age ends at the answer's valid_until (its s-maxage, for an answer a
        # validity lease extends, while the replicas purge lp:<partition> before a lease
        # would lapse: PRECAST_EDGE__LEASE_TTL_S): ttl + grace must end there too, so the
        # grace is taken from the end of the validity, never added after it: the last 2 s
        # (half of a shorter one), early enough that a conditional refresh (a 304 that may
        # carry a lease's longer max-age) still gets a copy worth storing. vcl_recv's
        # req.grace serves a copy stale only for the first 0.5 s of its grace.
        if (beresp.ttl > 4s) {
            set beresp.grace = 2s;
        } else if (beresp.ttl > 1s) {
            set beresp.grace = beresp.ttl * 0.5;
        } else {
            set beresp.grace = 0s;
        }
        set beresp.ttl = beresp.ttl - beresp.grace;
        # A copy fetched with credentials lives at most 2 s, grace included: a revoked token
        # reads no longer at the edge than at the API (its tokens file is re-read every second).
        if (bereq.http.authorization && beresp.ttl + beresp.grace > 2s) {
            set beresp.ttl = 1s;
            set beresp.grace = 1s;
        }
        # Kept past its ttl for conditional refreshes (If-None-Match on the weak ETag); a 304
        # keeps the body and takes the API's new headers (a validity lease extends max-age).
        set beresp.keep = 30s;
        if (beresp.was_304) {
            set beresp.http.x-precast-fetch = "revalidated";
        } else {
            unset beresp.http.x-precast-fetch;
        }
        unset beresp.http.set-cookie;
        return (deliver);
    }
    # Anything else (fallbacks, stale answers, errors, other paths) is not stored.
    set beresp.uncacheable = true;
    set beresp.ttl = 0s;
    set beresp.grace = 0s;
    return (deliver);
}

sub vcl_synth {
    # Short plain answers (purges, refusals) instead of Varnish's HTML page.
    set resp.http.content-type = "text/plain; charset=utf-8";
    set resp.body = resp.reason + {"
"};
    return (deliver);
}

sub vcl_backend_error {
    # No replica answered (none ready, or all down): a JSON error like the API's own, never
    # an HTML page, and never a cached one.
    set beresp.http.content-type = "application/json";
    set beresp.http.retry-after = "1";
    set beresp.http.cache-control = "no-store";
    set beresp.body = {"{"error":"origin_unavailable","detail":"no read API replica answered the edge; retry" }"};
    set beresp.ttl = 0s;
    return (deliver);
}

sub vcl_deliver {
    # RFC 9211 Cache-Status, and the edge's own time in Server-Timing: the API's entries (from
    # when the copy was fetched) pass through, `edge` is this request's time in Varnish.
    if (req.http.x-precast-edge == "hit" || req.http.x-precast-edge == "stale") {
        # The read span a traceresponse names was the read that filled the cache, not this
        # one: a board echoing it would hang its render under someone else's read.
        unset resp.http.traceresponse;
        set resp.http.cache-status = "precast-edge; hit; ttl=" + std.integer(duration=obj.ttl, fallback=0);
        if (req.http.x-precast-edge == "stale") {
            # within the grace: served while one background fetch refreshes it
            set resp.http.cache-status = resp.http.cache-status + "; detail=stale-while-revalidate";
        } else if (resp.http.x-precast-fetch == "revalidated") {
            set resp.http.cache-status = resp.http.cache-status + "; detail=revalidated";
        }
    } else if (req.http.x-precast-edge == "miss" && resp.http.x-precast-fetch == "revalidated") {
        set resp.http.cache-status = "precast-edge; fwd=stale; fwd-status=304; stored";
    } else if (req.http.x-precast-edge == "miss" && !obj.uncacheable) {
        set resp.http.cache-status = "precast-edge; fwd=miss; fwd-status=" + resp.status + "; stored";
    } else if (req.http.x-precast-edge == "miss") {
        set resp.http.cache-status = "precast-edge; fwd=miss; fwd-status=" + resp.status;
    } else {
        set resp.http.cache-status = "precast-edge; fwd=bypass; fwd-status=" + resp.status;
    }
    if (req.http.x-precast-edge) {
        set resp.http.server-timing = regsub(
            resp.http.server-timing + ", ", "^, $", "") + "edge;desc=" + req.http.x-precast-edge
            + ";dur=" + std.real(duration=(now - req.time), fallback=0) * 1000;
    }
    unset resp.http.xkey;
    unset resp.http.surrogate-key;
    unset resp.http.x-precast-fetch;
}

# compose's backends.vcl (compose/docker-compose.yml mounts it beside precast.vcl): the read API
# service behind the edge, probed on /readyz (a replica still loading gets no requests), and who
# may purge: the `front` network (PRECAST_PROXY_SUBNET, 172.30.52.0/27 by default; change both
# together), where the API replicas are. `precast stack up --edge` writes its own.
import directors;

probe api_ready {
    .url = "/readyz";
    .interval = 2s;
    .timeout = 1s;
    .window = 3;
    .threshold = 2;
    .initial = 2;
}

backend api0 {
    .host = "api";
    .port = "8000";
    .probe = api_ready;
    .connect_timeout = 1s;
    .first_byte_timeout = 5s;
    .between_bytes_timeout = 60s;
}

acl purgers {
    "172.30.52.0"/27;
}

sub vcl_init {
    new origin = directors.round_robin();
    origin.add_backend(api0);
}

# Sourced by run.sh and callgrind.sh, so both measure nginx with one proxy_pass config.
# nginx_conf WORK LISTEN_PORT UPSTREAM_PORT PROCESS_LINES: writes $WORK/nginx.conf (and the
# temp dirs under $WORK/ngx); PROCESS_LINES are the main-context lines that differ between the
# scripts (worker count, daemon, master process).
nginx_conf() {
  local work=$1 port=$2 up=$3 procs=$4
  mkdir -p "$work/ngx"
  cat >"$work/nginx.conf" <<NGX
$procs
pid $work/nginx.pid;
error_log $work/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/ngx/body;
  proxy_temp_path $work/ngx/proxy;
  fastcgi_temp_path $work/ngx/fastcgi;
  uwsgi_temp_path $work/ngx/uwsgi;
  scgi_temp_path $work/ngx/scgi;
  upstream engine { server 127.0.0.1:$up; keepalive 128; }
  server {
    listen 127.0.0.1:$port;
    location / {
      proxy_pass http://engine;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
NGX
}

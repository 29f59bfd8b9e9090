# A local stand-in for the public haproxy image (the balancer in front of the api replicas), built by
# test/docker/base/build.sh: Debian bookworm's haproxy on the debootstrapped root filesystem (BASE). Like the public
# image: the configuration at /usr/local/etc/haproxy/haproxy.cfg (mounted by docker-compose.yml), run as the
# unprivileged `haproxy` user, in the foreground (-db) with its master-worker (-W) so SIGTERM stops it cleanly.
ARG BASE
FROM ${BASE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends haproxy \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log \
 && mkdir -p /usr/local/etc/haproxy
USER haproxy
STOPSIGNAL SIGUSR1
ENTRYPOINT ["haproxy", "-W", "-db"]
CMD ["-f", "/usr/local/etc/haproxy/haproxy.cfg"]

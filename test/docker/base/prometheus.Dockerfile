# A local stand-in for the public prom/prometheus image (the observability profile's Prometheus), built by
# test/docker/base/build.sh: Debian bookworm's prometheus on the debootstrapped root filesystem (BASE). Like the public
# image: the binary is the entrypoint, data in /prometheus, run as nobody, so the profile's `command:` (flags only)
# works unchanged. (Debian's build defaults --storage.tsdb.path to /var/lib/prometheus/metrics2/: a link to /prometheus.)
ARG BASE
FROM ${BASE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends prometheus \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log \
 && mkdir -p /prometheus /var/lib/prometheus && chown nobody:nogroup /prometheus \
 && rm -rf /var/lib/prometheus/metrics2 && ln -s /prometheus /var/lib/prometheus/metrics2
VOLUME /prometheus
WORKDIR /prometheus
USER nobody
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]

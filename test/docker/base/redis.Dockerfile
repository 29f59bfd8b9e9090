# A local stand-in for the public redis:7-alpine image, built by test/docker/base/build.sh: Debian bookworm's
# redis-server and redis-cli on the debootstrapped root filesystem (BASE). Like the public image: runs as the
# unprivileged `redis` user in /data (a volume), protected mode off (the entrypoint adds it, as the public image's
# build does), so `command: redis-server --appendonly yes` and `redis-cli ping` behave the same on both.
ARG BASE
FROM ${BASE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends redis-server redis-tools \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log \
 && mkdir -p /data && chown redis:redis /data
COPY redis-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
VOLUME /data
WORKDIR /data
USER redis
EXPOSE 6379
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["redis-server"]

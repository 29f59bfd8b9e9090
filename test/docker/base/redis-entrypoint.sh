#!/bin/sh
# As the public redis image: `docker run image --flag` means `redis-server --flag`, and a redis-server started
# without a config file has protected mode off (the public image patches that default into its build), so
# other containers on the Compose network may connect.
set -e
if [ "${1#-}" != "$1" ]; then
  set -- redis-server "$@"
fi
if [ "$1" = redis-server ]; then
  case " $* " in
    *" --protected-mode "*) ;;
    *) set -- "$@" --protected-mode no ;;
  esac
fi
exec "$@"

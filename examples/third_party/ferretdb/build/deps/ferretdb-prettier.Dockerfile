FROM ghcr.io/ferretdb/ferretdb-prettier:3.3.2-1

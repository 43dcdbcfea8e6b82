FROM postgres:16.3

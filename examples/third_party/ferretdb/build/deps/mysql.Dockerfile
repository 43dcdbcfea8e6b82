FROM mysql:8.4.0

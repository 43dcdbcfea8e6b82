FROM aquasec/trivy:0.53.0
WORKDIR /workdir

package mongotest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeBackends records which backends choose tried; the container fails
// with containerErr if set, as when the image cannot be pulled.
type fakeBackends struct {
	docker       bool
	containerErr error
	tried        []string
	logged       []string
}

func (f *fakeBackends) backends() backends {
	return backends{
		dockerAnswers: func(context.Context) bool { return f.docker },
		container: func(context.Context) (*Server, error) {
			f.tried = append(f.tried, BackendDocker)
			if f.containerErr != nil {
				return nil, f.containerErr
			}
			return &Server{Backend: BackendDocker, URI: "mongodb://container"}, nil
		},
		devServer: func(context.Context) (*Server, error) {
			f.tried = append(f.tried, BackendDevServer)
			return &Server{Backend: BackendDevServer, URI: "mongodb://devserver"}, nil
		},
		logf: func(format string, args ...any) { f.logged = append(f.logged, fmt.Sprintf(format, args...)) },
	}
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

var errPull = errors.New(`pull mongo:8: Error response from daemon: Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io: no such host`)

// The harness's choice of server, without Docker: each backend is a fake
// that records it was tried.
func TestChoose(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name         string
		env          map[string]string
		docker       bool
		containerErr error
		want         string   // backend chosen, "" for an error
		tried        []string // in order
		logs         bool     // whether a fallback was logged
		errHas       []string
	}{
		{name: "MONGODB_URI wins", env: map[string]string{"MONGODB_URI": "mongodb://given"}, docker: true, want: BackendURI},
		{name: "docker answers", docker: true, want: BackendDocker, tried: []string{BackendDocker}},
		{name: "no docker", want: BackendDevServer, tried: []string{BackendDevServer}},
		{
			name: "docker answers, image cannot be pulled: falls back", docker: true, containerErr: errPull,
			want: BackendDevServer, tried: []string{BackendDocker, BackendDevServer}, logs: true,
		},
		{
			name: "docker demanded, image cannot be pulled: fails", env: map[string]string{"TWOPC_TEST_BACKEND": "docker"},
			docker: true, containerErr: errPull, tried: []string{BackendDocker},
			errHas: []string{"TWOPC_TEST_BACKEND=docker", "no such host", "docker pull mongo:8", "MONGODB_URI", "unset TWOPC_TEST_BACKEND"},
		},
		{name: "docker demanded", env: map[string]string{"TWOPC_TEST_BACKEND": "docker"}, want: BackendDocker, tried: []string{BackendDocker}},
		{name: "devserver demanded", env: map[string]string{"TWOPC_TEST_BACKEND": "devserver"}, docker: true, want: BackendDevServer, tried: []string{BackendDevServer}},
		{name: "uri demanded, none given", env: map[string]string{"TWOPC_TEST_BACKEND": "uri"}, errHas: []string{"MONGODB_URI is empty"}},
		{name: "unknown backend", env: map[string]string{"TWOPC_TEST_BACKEND": "postgres"}, errHas: []string{`"postgres"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeBackends{docker: tc.docker, containerErr: tc.containerErr}
			s, err := choose(ctx, env(tc.env), f.backends())
			assert.Equal(t, tc.tried, f.tried)
			if tc.want == "" {
				require.Error(t, err)
				for _, part := range tc.errHas {
					assert.Contains(t, err.Error(), part)
				}
				if tc.containerErr != nil {
					assert.ErrorIs(t, err, tc.containerErr)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, s.Backend)
			if tc.logs {
				require.Len(t, f.logged, 1)
				assert.Contains(t, f.logged[0], "no such host")
				assert.Contains(t, f.logged[0], "falling back to the dev server")
			} else {
				assert.Empty(t, f.logged)
			}
		})
	}
}

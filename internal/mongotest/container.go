package mongotest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// containerImage is the MongoDB image the harness runs under Docker.
const containerImage = "mongo:8"

// dockerAnswers reports whether a Docker engine is reachable. It returns
// quickly when there is plainly none (no DOCKER_HOST and no socket).
func dockerAnswers(ctx context.Context) (ok bool) {
	if os.Getenv("DOCKER_HOST") == "" {
		if _, err := os.Stat("/var/run/docker.sock"); err != nil {
			return false
		}
	}
	defer func() {
		if recover() != nil { // testcontainers may panic without an engine
			ok = false
		}
	}()
	provider, err := testcontainers.NewDockerProvider()
	if err != nil {
		return false
	}
	defer provider.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return provider.Health(ctx) == nil
}

// startContainer runs mongo:8 as a single-node replica set, so that native
// transactions are available for comparison.
func startContainer(ctx context.Context) (*Server, error) {
	c, err := testcontainers.Run(ctx, containerImage,
		// enableTestCommands: the tests send MongoDB's failCommand fail
		// point (configureFailPoint), as the drivers' specification tests do.
		testcontainers.WithCmd("--replSet", "rs0", "--bind_ip_all", "--setParameter", "enableTestCommands=1"),
		testcontainers.WithExposedPorts("27017/tcp"),
		testcontainers.WithWaitStrategy(wait.ForListeningPort("27017/tcp")),
	)
	if err != nil {
		if c != nil {
			_ = c.Terminate(context.Background())
		}
		return nil, fmt.Errorf("start %s container: %w", containerImage, err)
	}
	stop := func() error { return c.Terminate(context.Background()) }
	endpoint, err := c.PortEndpoint(ctx, "27017/tcp", "")
	if err != nil {
		_ = stop()
		return nil, fmt.Errorf("container endpoint: %w", err)
	}
	uri := "mongodb://" + endpoint + "/?directConnection=true"
	if err := initiateReplicaSet(ctx, uri); err != nil {
		_ = stop()
		return nil, err
	}
	return &Server{Backend: BackendDocker, URI: uri, stop: stop}, nil
}

// initiateReplicaSet makes the container's mongod the primary of rs0 and
// waits until it accepts writes.
func initiateReplicaSet(ctx context.Context, uri string) error {
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		return err
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	admin := client.Database("admin")
	cfg := bson.D{{Key: "_id", Value: "rs0"}, {Key: "members", Value: bson.A{
		bson.D{{Key: "_id", Value: 0}, {Key: "host", Value: "127.0.0.1:27017"}},
	}}}
	err = admin.RunCommand(ctx, bson.D{{Key: "replSetInitiate", Value: cfg}}).Err()
	var ce mongo.CommandError
	if err != nil && !(errors.As(err, &ce) && ce.Name == "AlreadyInitialized") {
		return fmt.Errorf("replSetInitiate: %w", err)
	}
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		var hello struct {
			IsWritablePrimary bool `bson:"isWritablePrimary"`
		}
		if err := admin.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err == nil && hello.IsWritablePrimary {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replica set never elected a primary: %w", ctx.Err())
		case <-time.After(backoff):
		}
	}
}

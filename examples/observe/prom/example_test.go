package prom_test

import (
	"context"
	"log"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/examples/observe/prom"
)

// The observer on the default registry, served on /metrics.
func ExampleNewObserver() {
	var db *mongo.Database // connected elsewhere
	observer, err := prom.NewObserver(prometheus.DefaultRegisterer)
	if err != nil {
		log.Fatal(err)
	}
	c, err := twopc.NewCoordinator(db, twopc.WithObserver(observer))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	go twopc.NewRecoverer(c).Run(context.Background()) // its actions are observed too
	http.Handle("/metrics", promhttp.Handler())
	log.Fatal(http.ListenAndServe("127.0.0.1:2112", nil))
}

package otel_test

import (
	"context"
	"log"

	"go.mongodb.org/mongo-driver/v2/mongo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/examples/observe/otel"
)

// The observer on the SDK's meter provider. A program would give the
// provider an exporter's reader (OTLP, stdout, Prometheus) in place of the
// manual one, and read it on its own schedule.
func ExampleNewObserver() {
	var db *mongo.Database // connected elsewhere
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())
	observer, err := otel.NewObserver(provider.Meter("github.com/twopc/twopc"))
	if err != nil {
		log.Fatal(err)
	}
	c, err := twopc.NewCoordinator(db, twopc.WithObserver(observer))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
}

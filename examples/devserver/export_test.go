package devserver

// SetBetween has s's front call f between two statements of a write
// command and between the documents of a multi-document statement, with
// its lock released (see Front.between), so that tests can put another
// client's request there.
func SetBetween(s *Server, f func(stmt, doc int)) { s.front.between = f }

// BackendURI returns the URI FerretDB listens on behind s's front: "" when
// it listens nowhere and the front hands it each request in process.
func BackendURI(s *Server) string { return s.ferret.MongoDBURI() }

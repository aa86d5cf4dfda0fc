module github.com/mongostore/mongostore/cmd/loadbench/peers

go 1.25.0

replace github.com/mongostore/mongostore => ../../..

require (
	github.com/gorilla/sessions v1.4.0
	github.com/laziness-coders/mongostore v0.0.14
	github.com/mongostore/mongostore v0.0.0-00010101000000-000000000000
	go.mongodb.org/mongo-driver v1.17.10
)

require (
	github.com/golang/snappy v0.0.4 // indirect
	github.com/gorilla/securecookie v1.1.2 // indirect
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/montanaflynn/stats v0.7.1 // indirect
	github.com/xdg-go/pbkdf2 v1.0.0 // indirect
	github.com/xdg-go/scram v1.2.0 // indirect
	github.com/xdg-go/stringprep v1.0.4 // indirect
	github.com/youmark/pkcs8 v0.0.0-20240726163527-a2c0da244d78 // indirect
	go.mongodb.org/mongo-driver/v2 v2.9.3 // indirect
	golang.org/x/crypto v0.53.0 // indirect
	golang.org/x/sync v0.21.0 // indirect
	golang.org/x/text v0.39.0 // indirect
)

# syntax=docker/dockerfile:1

# outboxd as a static binary on distroless, running as non-root (65532).
#
#   docker build -t outboxd .                                    # the publisher (last stage)
#   docker build --target example-consumer -t outboxd-consumer .  # the example consumer
#   docker build --build-arg VERSION=v1.2.3 -t outboxd:v1.2.3 .
#
# The golang image uses its own toolchain (GOTOOLCHAIN=local): GO_VERSION
# must be at least the go line of go.mod.
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .

FROM build AS build-outboxd
ARG VERSION=dev
RUN --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/outboxd ./cmd/outboxd

FROM build AS build-consumer
RUN --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/example-consumer ./examples/consumer

FROM gcr.io/distroless/static-debian12:nonroot AS example-consumer
COPY --from=build-consumer /out/example-consumer /example-consumer
USER 65532:65532
ENTRYPOINT ["/example-consumer"]

# The final stage, what `docker build` without --target produces.
FROM gcr.io/distroless/static-debian12:nonroot AS outboxd
COPY --from=build-outboxd /out/outboxd /outboxd
USER 65532:65532
# --metrics-addr, when set (e.g. :9187)
EXPOSE 9187
ENTRYPOINT ["/outboxd"]
CMD ["run"]

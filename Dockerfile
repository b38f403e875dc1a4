# syntax=docker/dockerfile:1
#
# The xpu_exporter image. Its build step is `make release-binary`, the
# target `make dist` builds the release archives with (and CI exercises), run
# on the build machine's platform for the target one: amd64 natively or
# arm64 with Debian's cgo cross-compiler, which the target installs.
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg REVISION=$(git rev-parse --short HEAD) -t ghcr.io/xpu-exporter/xpu_exporter:$(cat VERSION) .
#
# Runtime base: distroless base (glibc, CA certificates, no shell or package
# manager). NVML is loaded with dlopen through cgo, so the binary needs
# glibc: the static distroless image would not do. The NVIDIA container
# runtime mounts libnvidia-ml.so.1 and /dev/nvidia* into the container;
# nothing of the driver is in the image. Both stages are Debian 12, so the
# binary runs against the glibc it was built with.
#
# The image runs as the distroless nonroot user (65532). Enough for NVML
# with the stock driver's world-accessible device nodes; the Helm chart runs
# it as UID 0 with every capability dropped, because the kubelet's
# pod-resources socket only admits root (see chart/values.yaml).

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
ARG TARGETARCH
# The build has no .git (see .dockerignore): pass the commit in.
ARG REVISION=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN make release-binary ARCH=${TARGETARCH} REVISION=${REVISION} BRANCH=unknown

FROM gcr.io/distroless/base-debian12:nonroot
ARG TARGETARCH
COPY --from=build /src/dist/stage/linux-${TARGETARCH}/xpu_exporter /bin/xpu_exporter
USER 65532:65532
EXPOSE 9835
ENTRYPOINT ["/bin/xpu_exporter"]

# ubatch's image for those with Docker (or podman, buildah): the same layout `ubatch image`
# writes without a daemon (internal/ociimage): a static binary on an empty base, user 65532,
# port 8080, the library and --kv-disk on the volume /data ($UBATCH_HOME).
#   docker build -t ubatch .   &&   docker run -p 8080:8080 -v ubatch:/data ubatch
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# CGO_ENABLED=0: the empty base has no C library (with cgo the net package links it).
RUN CGO_ENABLED=0 go build -trimpath -o /out/usr/local/bin/ubatch ./cmd/ubatch \
 && mkdir -p /out/etc /out/tmp /out/data /out/home/nonroot \
 && chmod 1777 /out/tmp \
 && printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > /out/etc/passwd \
 && printf 'root:x:0:\nnonroot:x:65532:\n' > /out/etc/group

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/etc/ /etc/
COPY --from=build /out/tmp /tmp
COPY --from=build --chown=65532:65532 /out/data /data
COPY --from=build --chown=65532:65532 /out/home/nonroot /home/nonroot
COPY --from=build /out/usr/local/bin/ubatch /usr/local/bin/ubatch
ENV PATH=/usr/local/bin:/usr/bin:/bin UBATCH_HOME=/data HOME=/home/nonroot
WORKDIR /home/nonroot
USER 65532:65532
EXPOSE 8080
VOLUME /data
ENTRYPOINT ["/usr/local/bin/ubatch"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]

# syntax=docker/dockerfile:1
# One image, three entry points: the admission webhook (the default command), the
# log sidecar it injects into Jobs (args ["/app/sidecar.mjs"]) and the harvester
# (args ["/app/harvester.mjs", ...]). Each is a single
# bundled files, so the runtime stage has no node_modules, no package manager and no shell.

# --- build: install the locked dependencies and bundle ------------------------
# On the build machine's platform for every target: the bundles are JavaScript,
# the same for all, and no RUN step runs under emulation.
FROM --platform=$BUILDPLATFORM node:24-bookworm-slim AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY scripts/bundle.mjs scripts/esbuild-options.mjs scripts/
COPY src/ src/
COPY sidecar/ sidecar/
COPY harvester/ harvester/
# Type checking and tests run in CI (npm run build, npm run test:all); here only
# the bundler runs. Source maps stay out of the runtime image to keep it small.
RUN node scripts/bundle.mjs \
 && find dist -name '*.map' -delete \
 && node dist/jobharvest.mjs --help >/dev/null \
 && node dist/sidecar.mjs --help >/dev/null \
 && node dist/harvester.mjs --help >/dev/null

# --- runtime: distroless Node.js 24, non-root ----------------------------------
# The target platform is the default; said here because buildah 1.28 (Debian
# bookworm's) otherwise pulls this stage's base for the platform of the FROM
# --platform above, and the arm64 image got amd64's node.
# hadolint ignore=DL3065
FROM --platform=$TARGETPLATFORM gcr.io/distroless/nodejs24-debian12:nonroot
ARG VERSION=0.2.0
LABEL org.opencontainers.image.title="jobharvest" \
      org.opencontainers.image.description="Kubernetes admission webhook and native sidecar that ship every Job's logs before TTL garbage collection deletes it" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
WORKDIR /app
# Entry points and the chunks they load lazily (every bundle is code-split).
COPY --from=build /src/dist/ /app/
# The distroless "nonroot" user, by number so that runAsNonRoot can verify it.
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["/nodejs/bin/node"]
CMD ["/app/jobharvest.mjs", "webhook", "--host", "0.0.0.0", "--port", "8443"]

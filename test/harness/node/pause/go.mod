// The sandbox ("pause") program of the real-node tests' pod sandboxes. No
// dependencies: it is built with CGO_ENABLED=0 into a static binary so that
// its image needs nothing else.
module jobharvest/test/node/pause

go 1.26.0

// Starts Swagger UI on /openapi.json. Its own file, not an inline script, so the page's
// Content-Security-Policy can forbid inline scripts. Paths are relative to /docs so that the
// page also works behind a proxy that mounts the server under a prefix.
"use strict";
window.addEventListener("DOMContentLoaded", function () {
  window.ui = SwaggerUIBundle({
    url: new URL("openapi.json", document.baseURI).href,
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: "none", // never call validator.swagger.io: the page works offline
    presets: [SwaggerUIBundle.presets.apis],
  });
});

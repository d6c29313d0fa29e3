// Runs TFMA's Polymer bundle once when nbclassic opens a notebook, before any TFMA view needs it
// (`make notebook-classic` enables this next to TFMA's own extension.js).
//
// Why: TFMA's views add the bundle (vulcanized_tfma.js) as a plain <script> when the first one
// draws. The bundle holds one anonymous AMD define() (d3-tip's, which TFMA never uses); require.js,
// which nbclassic runs, keeps it queued and rejects it at its next module load ("Mismatched
// anonymous define() module"), so, depending on timing, the next TFMA widget stays blank ("Could
// not create a model"). Here the bundle runs with define() silenced for exactly its synchronous
// run, and a non-executable <script src> marker is what TFMA's views check before adding the bundle.
define([], function () {
  'use strict';
  const BUNDLE = 'nbextensions/tensorflow_model_analysis/vulcanized_tfma.js';

  function runSilencingDefine(code, src) {
    const define = window.define;
    window.define = Object.assign(function () {}, {amd: define && define.amd});
    try {
      const script = document.createElement('script');
      script.textContent = `${code}\n//# sourceURL=${src}`;
      document.head.appendChild(script); // an inline script runs during appendChild
    } finally {
      window.define = define;
    }
  }

  function load_ipython_extension() {
    const src = (document.body.getAttribute('data-base-url') || '/') + BUNDLE;
    if (document.querySelector(`script[src="${src}"]`)) {
      return Promise.resolve();
    }
    const marker = document.createElement('script');
    marker.type = 'text/plain'; // never fetched nor run: only TFMA's "already added" check sees it
    marker.setAttribute('src', src);
    document.head.appendChild(marker);
    return fetch(src, {credentials: 'same-origin'})
      .then((answer) => {
        if (!answer.ok) {
          throw new Error(`${src}: HTTP ${answer.status}`);
        }
        return answer.text();
      })
      .then((code) => runSilencingDefine(code, src))
      .catch((error) => console.error('tfma_preload: TFMA views will not draw:', error));
  }

  return {load_ipython_extension: load_ipython_extension};
});
